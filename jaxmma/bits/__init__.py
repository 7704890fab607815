"""Floor 1: element formats (``_formats``), multi-limb integers and output formats
(``_wide``), sub-word packing (``_packing``), element values <-> raw bits (``_values``)."""
