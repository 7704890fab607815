"""Floor 0: the one table of the spec's forms (``_spec``), the PTX parser (``_ptx``) and
the type of what lower floors read of an instruction (``_view``)."""
