"""Files copied verbatim into every saved package (ExportedProgram.save): they import numpy
(and the package's own files) only, never aotgrad. `run.py` is the package's entry point;
`reference.py` holds the numpy implementations of the prims the code generator leaves to
reference steps."""
