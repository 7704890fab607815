"""The tests reach the library through its public package and the floors' interfaces
(``jaxmma.<floor>``'s ``__all__``), not through private modules: a test that takes a
private module or name (``jaxmma.<floor>._module``, ``from jaxmma.<floor> import _x``)
must be a unit test of that module's own workings, listed below with why. Read from the
source text with ``ast``; nothing is imported."""

import ast
import pathlib

import pytest

TESTS = pathlib.Path(__file__).resolve().parent

#: (test file, private module or name) -> why the test reads it
ALLOWED = {
    ("test_block_kernel.py", "jaxmma.gemm._block_kernel"): "the kernel's tiles, modes and path",
    ("test_block_kernel.py", "jaxmma.gemm._block_scaled"): "the executor's gemm_bits, by path",
    ("test_block_kernel.py", "jaxmma.models._group_gemm"): "the group model the kernel fuses",
    ("test_block_kernel_ptx.py", "jaxmma.gemm._block_kernel"): "the kernel's PTX fusion helpers",
    ("test_block_scaled_gemm.py", "jaxmma.gemm._block_scaled"): "the executor's covers and path",
    ("test_block_scaled_gemm.py", "jaxmma.gemm._chain"): "the XLA chain, the executor's oracle",
    ("test_block_scaled_gemm.py", "jaxmma.gemm._executors"): "the dispatcher's gemm_bits",
    ("test_block_scaled_gemm.py", "jaxmma.models._product_gemm"): "the product model's helpers",
    ("test_conformance_tools.py", "jaxmma.conformance._compare"): "the harness's own tests",
    ("test_conformance_tools.py", "jaxmma.conformance._golden"): "golden file records and names",
    ("test_conformance_tools.py", "jaxmma.conformance._gpu"): "the kernel compiler driver",
    ("test_conformance_tools.py", "jaxmma.conformance._kernels"): "the generated CUDA kernels",
    ("test_conformance_tools.py", "jaxmma.conformance._vectors"): "the input streams' layout",
    ("test_cpu_options.py", "jaxmma.util._cpu"): "the CPU's flags, replaced by the test",
    ("test_executors.py", "jaxmma.gemm._block_scaled"): "each executor's covers and path",
    ("test_executors.py", "jaxmma.gemm._chain"): "the XLA chain executor",
    ("test_executors.py", "jaxmma.gemm._config"): "the resolved Config the executors take",
    ("test_executors.py", "jaxmma.gemm._executors"): "the Executor interface and choose",
    ("test_executors.py", "jaxmma.gemm._pallas"): "the Pallas executor's path",
    ("test_fixed.py", "jaxmma.arith._numerics"): "the general engine the fixed one must match",
    ("test_fixed.py", "jaxmma.models._chain"): "the chain's significand width",
    ("test_fixed_sums.py", "jaxmma.arith._fixed"): "the fixed-width sum's parts",
    ("test_fixed_sums.py", "jaxmma.arith._numerics"): "the general block rounding, the oracle",
    ("test_float64.py", "jaxmma.arith._float64"): "the f64 FMA against the host's",
    ("test_ieee.py", "jaxmma.arith._fma32"): "the int32 FFMA against the engine",
    ("test_replay_max.py", "jaxmma.conformance._xla_triton_max"): "the captured cases",
    ("test_replay_max.py", "jaxmma.xla_gpu._hlo"): "the module facts of the max reductions",
    ("test_replay_subnormal.py", "jaxmma.conformance._xla_subnormal"): "the captured cases",
    ("test_replay_subnormal.py", "jaxmma.xla_gpu._replay_ieee"): "the operations on bits",
    ("test_replay_subnormal.py", "jaxmma.xla_gpu._xla_sum"): "a Triton reduce's refusal",
    ("test_gemm_api.py", "jaxmma.gemm._pipeline"): "the forward on bits under the public face",
    ("test_gemm_backward.py", "jaxmma.gemm._gemm"): "resets the once-only warning",
    ("test_gemm_golden.py", "jaxmma.conformance._gemm"): "the GEMM golden cases and tiling",
    ("test_gemm_grad.py", "jaxmma.instructions._wmma"): "the wmma fragment helpers",
    ("test_gemm_grad.py", "jaxmma.models._models"): "spies on mma_bits where it is called",
    ("test_gemm_library.py", "jaxmma.conformance._library"): "the library captures' cases",
    ("test_gemm_library.py", "jaxmma.gemm._native"): "why the native executor refuses",
    ("test_int32_convert.py", "jaxmma.arith._int32"): "the int32 conversion's bits",
    ("test_int32_convert.py", "jaxmma.arith._numerics"): "the general conversion, the oracle",
    ("test_integer.py", "jaxmma.arith._integer"): "the integer accumulation",
    ("test_layouts.py", "jaxmma.operands._layouts"): "the layout tables and metadata layouts",
    ("test_memory.py", "jaxmma.instructions._wmma"): "the wmma fragment layout",
    ("test_native.py", "jaxmma.gemm._executors"): "the executor list",
    ("test_native.py", "jaxmma.gemm._pipeline"): "the pipeline's forward jit, after the checks",
    ("test_native.py", "jaxmma.gemm._native"): "the native executor's schedule and refusals",
    ("test_native.py", "jaxmma.gemm._options"): "KernelOptions for the executor",
    ("test_pallas.py", "jaxmma.gemm._chain"): "the XLA chain, the kernel's oracle",
    ("test_pallas.py", "jaxmma.gemm._pallas"): "the Pallas kernel's plan and path",
    ("test_partition.py", "jaxmma.gemm._partition"): "the sharding rule's output spec",
    ("test_policy.py", "jaxmma.intercept._evaluate"): "the modules' doctests",
    ("test_policy.py", "jaxmma.intercept._linen"): "the modules' doctests",
    ("test_policy.py", "jaxmma.intercept._rules"): "the modules' doctests",
    ("test_policy.py", "jaxmma.intercept._targets"): "the modules' doctests",
    ("test_product_kernel.py", "jaxmma.gemm._block_scaled"): "the executor's covers, by path",
    ("test_product_kernel.py", "jaxmma.gemm._chain"): "the XLA chain, the kernel's oracle",
    ("test_product_kernel.py", "jaxmma.gemm._executors"): "the dispatcher's gemm_bits",
    ("test_product_kernel.py", "jaxmma.gemm._product_kernel"): "the kernel's windows and branch",
    ("test_product_ptx.py", "jaxmma.gemm._product_kernel"): "the int32 fusion, the PTX's oracle",
    ("test_product_ptx.py", "jaxmma.gemm._product_ptx"): "the PTX fusion's text",
    ("test_ptx.py", "jaxmma.spec._ptx"): "the Arch record of the PTX parser",
    ("test_ptx.py", "jaxmma.spec._spec"): "the spec table's variant counts",
    ("test_quant.py", "jaxmma.instructions._mma"): "the matrix_mma hook",
    ("test_quant.py", "jaxmma.operands._quant"): "the MX formats table",
    ("test_quant_dequantize.py", "jaxmma.operands._quant"): "the dequantizer's helpers",
    ("test_quant_divide.py", "jaxmma.operands._quant"): "the exact division's helpers",
    ("test_registry.py", "jaxmma.spec._ptx"): "the PTX type lists the registry must cover",
    ("test_scaled_dot.py", "jaxmma.gemm._scaled_dot"): "the module's doctests",
    ("test_scaled_engines.py", "jaxmma.models._scaled"): "the scaled engines' group sums",
    ("test_sparse.py", "jaxmma.operands._sparse"): "the sparse geometry helper",
    ("test_stats.py", "jaxmma.training._stats"): "the module's doctests",
    ("test_tcgen05.py", "jaxmma.instructions._instruction"): "the tcgen05 constructor",
    ("test_tcgen05.py", "jaxmma.instructions._tcgen05"): "the module's doctests",
    ("test_tcgen05.py", "jaxmma.spec._spec"): "the spec table's forms",
    ("test_gpu_math.py", "jaxmma.conformance._xla_models"): "the captured probe cases",
    ("test_xla_gemm_fused.py", "jaxmma.conformance._xla_gemm_fused"): "the captured cases",
    ("test_xla_gemm_fused.py", "jaxmma.xla_gpu._hlo"): "the dot plan and the reader's refusals",
    ("test_xla_narrow_rows.py", "jaxmma.conformance._xla_narrow_rows"): "the captured cases",
    ("test_xla_narrow_rows.py", "jaxmma.xla_gpu._xla_sum"): "a layout the probes rule out",
    ("test_xla_scalar_sums.py", "jaxmma.conformance._xla_scalar_sums"): "the captured cases",
    ("test_xla_contract.py", "jaxmma.arith._fma32"): "an exact FMA, the contracted oracle",
    ("test_xla_contract.py", "jaxmma.conformance._xla_contract"): "the captured cases",
    ("test_xla_contract.py", "jaxmma.xla_gpu._hlo"): "the normalization tiles read",
    ("test_xla_frames.py", "jaxmma.conformance._xla_models"): "the captured functions",
    ("test_xla_trivial_reduce.py", "jaxmma.conformance._xla_trivial_reduce"): "the cases",
    ("test_xla_scatter.py", "jaxmma.conformance._xla_scatter"): "the captured cases",
    ("test_xla_rewrites.py", "jaxmma.xla_gpu._hlo"): "the module facts the rules read",
    ("test_xla_rewrites.py", "jaxmma.xla_gpu._replay_ops"): "the rules' findings and folds",
    ("test_xla_rewrites.py", "jaxmma.xla_gpu._replay"): "evaluation with the folds",
    ("test_xla_tanh_grad.py", "jaxmma.xla_gpu._hlo"): "the module fact the rule reads",
    ("test_xla_tanh_grad.py", "jaxmma.xla_gpu._hlo_jvp"): "the module's tanh gradient, read",
    ("test_xla_tanh_grad.py", "jaxmma.xla_gpu._hlo_text"): "parses the small modules",
    ("test_xla_tanh_grad.py", "jaxmma.xla_gpu._replay_ops"): "the rule's findings and plan",
    ("test_xla_tanh_grad.py", "jaxmma.xla_gpu._replay"): "evaluation with the plan",
    ("test_xla_frames.py", "jaxmma.conformance._xla_capture"): "output hashes",
    ("test_xla_frames.py", "jaxmma.xla_gpu._hlo"): "the module's plans and facts",
    ("test_xla_frames.py", "jaxmma.xla_gpu._hlo_frames"): "the stack-frame reader",
    ("test_xla_frames.py", "jaxmma.xla_gpu._hlo_flow"): "the fusions a fusion reads from memory",
    ("test_xla_frames.py", "jaxmma.xla_gpu._replay_ops"): "the sums' plans",
    ("test_xla_frames.py", "jaxmma.xla_gpu._replay"): "the analysis without evaluation",
    ("test_xla_sums.py", "jaxmma.conformance._xla_sums"): "the captured sum cases",
    ("test_xla_sums.py", "jaxmma.xla_gpu._hlo"): "the module facts of each sum",
    ("test_xla_sums.py", "jaxmma.xla_gpu._xla_sum"): "the sum orders and their refusals",
    ("test_wgmma.py", "jaxmma.spec._spec"): "the spec table's variant counts",
    ("test_x64.py", "jaxmma.conformance._compare"): "the harness's emulation and x64 rule",
    ("test_x64.py", "jaxmma.conformance._gemm"): "the GEMM golden cases",
    ("test_xla_gpu.py", "jaxmma.conformance._xla_capture"): "the XLA capture cases",
    ("test_xla_gpu.py", "jaxmma.xla_gpu._xla_reduce"): "the reduce emitters' orders",
    ("test_xla_gpu_models.py", "jaxmma.conformance._xla_capture"): "the XLA capture records",
    ("test_xla_gpu_models.py", "jaxmma.conformance._xla_models"): "the captured model cases",
    ("test_xla_gpu_models.py", "jaxmma.xla_gpu._hlo"): "the HLO reader's plans and refusals",
    ("test_xla_gpu_models.py", "jaxmma.xla_gpu._hlo_flow"): "the HLO reader's merged dots",
    ("test_xla_gpu_models.py", "jaxmma.xla_gpu._hlo_reduce"): "the HLO reader's root dimensions",
    ("test_xla_gpu_models.py", "jaxmma.xla_gpu._hlo_text"): "the HLO reader's parser",
    ("test_xla_gpu_models.py", "jaxmma.xla_gpu._replay"): "gpu_replay's pairing of dots",
    ("test_xla_gpu_models.py", "jaxmma.xla_gpu._replay_ops"): "the probed operations",
    ("test_xla_gpu_models.py", "jaxmma.xla_gpu._xla_reduce"): "the reduce emitters' orders",
    ("test_xla_gpu_ops.py", "jaxmma.conformance._xla_capture"): "the XLA capture records",
    ("test_xla_gpu_ops.py", "jaxmma.xla_gpu._hlo"): "the HLO reader's emitter facts",
    ("test_xla_gpu_ops.py", "jaxmma.xla_gpu._replay"): "gpu_replay's IEEE max / min",
    ("test_xla_gpu_ops.py", "jaxmma.xla_gpu._replay_ops"): "gpu_replay's operation checks",
}


#: calls that import a module named by a string
IMPORTERS = ("importorskip", "import_module")


def _private(dotted: str) -> str | None:
    """The first private part of a dotted ``jaxmma`` name, with what is above it
    (``jaxmma.arith._numerics`` of ``jaxmma.arith._numerics.EXACT``); None where none."""
    parts = dotted.split(".")
    if parts[0] != "jaxmma":
        return None
    for i, p in enumerate(parts[1:], 1):
        if p.startswith("_") and not p.startswith("__"):
            return ".".join(parts[: i + 1])
    return None


def private_uses(source: str) -> set:
    """(private module or name, line) for every import of one, every ``jaxmma.x._y``
    attribute chain and every ``"jaxmma.x._y"`` passed to ``importorskip`` or
    ``import_module``."""
    out = set()
    for node in ast.walk(ast.parse(source)):
        names = []
        if isinstance(node, ast.ImportFrom) and not node.level:
            names = [f"{node.module}.{a.name}" for a in node.names]
        elif isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.Attribute):
            chain, at = [node.attr], node.value
            while isinstance(at, ast.Attribute):
                chain.append(at.attr)
                at = at.value
            if isinstance(at, ast.Name):
                names = [".".join([at.id] + chain[::-1])]
        elif isinstance(node, ast.Call) and getattr(node.func, "attr", None) in IMPORTERS:
            names = [
                a.value
                for a in node.args
                if isinstance(a, ast.Constant) and isinstance(a.value, str)
            ]
        for name in names:
            found = _private(name)
            if found is not None:
                out.add((found, node.lineno))
    return out


FILES = sorted(TESTS.glob("*.py"))
USES = {p.name: private_uses(p.read_text()) for p in FILES}


def test_tests_use_the_interfaces():
    found = sorted(
        f"{f} line {line}: {name}"
        for f, uses in USES.items()
        for name, line in uses
        if (f, name) not in ALLOWED
    )
    assert not found, (
        "private modules or names of jaxmma in tests (use jaxmma or the floor's interface, "
        "or list the pair in ALLOWED with why):\n" + "\n".join(found)
    )


def test_the_allowlist_is_needed():
    used = {(f, name) for f, uses in USES.items() for name, _ in uses}
    stale = sorted(set(ALLOWED) - used)
    assert not stale, f"ALLOWED: no longer used, remove {stale}"
    assert all(why.strip() for why in ALLOWED.values())


def test_the_checker_sees_private_uses():
    src = (
        "import jaxmma\n"
        "from jaxmma import bits\n"
        "from jaxmma.arith import _numerics as N\n"
        "from jaxmma.bits._formats import decode\n"
        "import jaxmma.gemm._gemm\n"
        "x = jaxmma.instructions._wmma.layout\n"
        "pytest.importorskip('jaxmma.spec._spec')\n"
        "from jaxmma.gemm import matmul\n"
    )
    assert private_uses(src) == {
        ("jaxmma.arith._numerics", 3),
        ("jaxmma.bits._formats", 4),
        ("jaxmma.gemm._gemm", 5),
        ("jaxmma.instructions._wmma", 6),
        ("jaxmma.spec._spec", 7),
    }


#: the quick run keeps every case of this file (tests/conftest.py)
pytestmark = pytest.mark.every_case
