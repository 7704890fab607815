"""The fusion of a ``kind::mxf8f6f4`` step in the compiled product kernel: three PTX
routines per element with the exact sum in float64.

:func:`jaxmma.gemm._product_kernel._fuse` forms ``RZ_f32(trunc(C) + sum)`` in int32
limbs, about a hundred integer operations per element and step. Where the kernel calls
these routines, every term is a whole number of grid units ``2**unit``:

* C's term is ``trunc(C * 2**-unit)`` (C's order is at most ``e_max = unit + 25``, so
  its magnitude is below ``2**26``);
* the window sum of offset ``o`` is an integer ``S < 2**24`` (float32, exact) in units
  of ``2**(k + unit)`` with ``k = R + o - unit``; every product in it has its lsb at or
  above ``unit`` (the kernel checked), so ``S * 2**k`` is an integer, below ``32 *
  2**27 = 2**32`` (a product is below ``2**(e_max + 2)``, 27 bits over the grid);
* the truncated products the kernel took out of the windows, summed in int32 (``t``,
  below ``2**29``).

The kernel's per-product branch (a step where the windows do not hold) calls the same
routines: ``t`` the int32 sum of the step's first 16 truncated products and the other
16's sum (below ``2**31`` each) as two window planes of exact float32 integers, its top
23 bits at offset 8 and its low 8 at offset 0, with ``R = unit``.

Their sum is an integer below ``2**34``: float64 holds every partial sum exactly, in any
order. So the kernel forms it in pieces: :func:`start_text` C's term, one
:func:`add_text` per offset as soon as that offset's dots are done, :func:`finish_text`
``t`` and the result, the partial sum carried between them in a 64-bit register.
``sum * 2**unit`` is exact in float64 too, and one ``cvt.rz.f32.f64`` truncates it to
float32 (24 bits, or the subnormal grid), as :func:`_block_kernel._round_rz` does;
``|x| >= 2**128`` is Inf (the conversion would stop at the largest finite value),
``+ 0.0`` makes a -0 the model's +0, and an Inf or NaN C passes through.

The same tricks as :func:`jaxmma.gemm._block_kernel._ptx_fuse`: ``trunc(x)`` for
``|x| < 2**52`` is ``fma.rz(x, 1, s) - s`` with ``s = 2**52`` of ``x``'s sign (the
float64 grid there is the integers); an int32 ``t`` becomes float64 as the word
``{t + 2**31, 2**52's high word}`` less ``2**52 + 2**31``; ``2**k`` is built from its
high word ``(k + 1023) << 20``. ``tests/test_product_ptx.py`` runs the texts in an
interpreter of these instructions against the int32 fusion.
"""

from __future__ import annotations

from . import _block_kernel

#: a window's exponent over the grid, clamped (a sum that is not 0 has it in [-14, 24])
_K_CLAMP = 60


# The partial sum travels between the routines as a 64-bit register: an int64 array in
# the kernel, which no other operation touches.
def start_text() -> str:
    """``$0`` (out, 64 bits): ``trunc(C * 2**-unit)`` in float64; ``$1`` C bits, ``$2``
    ``unit``. An Inf or NaN C gives Inf or NaN, which :func:`finish_text` replaces by
    C."""
    return "\n".join(
        [
            "{",
            ".reg .b32 %r<4>;",
            ".reg .b64 %rd<2>;",
            ".reg .f64 %fd<5>;",
            ".reg .f32 %f<2>;",
            "mov.b32 %r0, 0;",
            "mov.b32 %r3, 1127219200;",  # 2**52's high word
            "sub.s32 %r1, 1023, $2;",
            "shl.b32 %r1, %r1, 20;",
            "mov.b64 %rd1, {%r0, %r1};",
            "mov.b64 %fd1, %rd1;",
            "mov.b32 %f1, $1;",
            "cvt.f64.f32 %fd2, %f1;",
            f"lop3.b32 %r2, $1, -2147483648, %r3, {_block_kernel._SIGN_OR};",
            "mov.b64 %rd1, {%r0, %r2};",
            "mov.b64 %fd3, %rd1;",
            "fma.rz.f64 %fd2, %fd2, %fd1, %fd3;",
            "sub.rn.f64 %fd4, %fd2, %fd3;",
            "mov.b64 $0, %fd4;",
            "}",
        ]
    )


def add_text(offset: int) -> str:
    """``$0`` (out, 64 bits): the partial sum ``$1`` plus the window sum of ``offset``
    (``$3``, float32 bits) times ``2**($2 + offset)``, ``$2`` = ``R - unit``; the
    exponent clamped to [-60, 60], where only a zero sum can lie beyond it."""
    return "\n".join(
        [
            "{",
            ".reg .b32 %r<2>;",
            ".reg .b64 %rd<2>;",
            ".reg .f64 %fd<4>;",
            ".reg .f32 %f<2>;",
            "mov.b32 %r0, 0;",
            f"add.s32 %r1, $2, {offset};",
            f"max.s32 %r1, %r1, {-_K_CLAMP};",
            f"min.s32 %r1, %r1, {_K_CLAMP};",
            "add.s32 %r1, %r1, 1023;",
            "shl.b32 %r1, %r1, 20;",
            "mov.b64 %rd1, {%r0, %r1};",
            "mov.b64 %fd1, %rd1;",
            "mov.b32 %f1, $3;",
            "cvt.f64.f32 %fd2, %f1;",
            "mov.b64 %fd3, $1;",
            "fma.rn.f64 %fd3, %fd2, %fd1, %fd3;",
            "mov.b64 $0, %fd3;",
            "}",
        ]
    )


def finish_text() -> str:
    """``$0`` (out): D bits from the partial sum ``$3`` (64 bits) plus ``t`` (``$4``, int32),
    ``$1`` C bits, ``$2`` ``unit``; an Inf or NaN C passes through."""
    lines = [
        "{",
        ".reg .pred %p<3>;",
        ".reg .b32 %r<10>;",
        ".reg .b64 %rd<2>;",
        ".reg .f64 %fd<8>;",
        ".reg .f32 %f<2>;",
        "mov.b32 %r0, 0;",
        "mov.b32 %r9, 1127219200;",  # 2**52's high word
        "mov.b64 %fd4, $3;",
        "add.s32 %r3, $4, -2147483648;",
        "mov.b64 %rd1, {%r3, %r9};",
        "mov.b64 %fd5, %rd1;",
        "sub.rn.f64 %fd5, %fd5, 0d4330000080000000;",
        "add.rn.f64 %fd4, %fd4, %fd5;",
    ]
    regs = dict(zero="%r0", hi="%r5", out="%r6", inf="%r7", sel="%r8", b64="%rd1")
    regs |= dict(scale="%fd1", abs="%fd5", f32="%f1", big="%p1", c_special="%p2", field="%r1")
    lines += _block_kernel.ptx_f32_out("%fd4", "$2", regs, ["bfe.u32 %r1, $1, 23, 8;"])
    return "\n".join(lines + ["}"])
