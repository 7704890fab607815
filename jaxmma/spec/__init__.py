"""Floor 0: the one table of the spec's forms (``_spec``) and the PTX parser (``_ptx``)."""
