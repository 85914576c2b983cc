"""Reference kernel data measured by others on GPUs this machine may not hold, read as measurements: NVIDIA's
aiconfigurator-core database (the optional extra ``pip install 'gpubench-roofline[reference]'``).

``database`` finds the installed package and reads its tables (which SKU, engine, version and dtype); ``gemm``
holds one GEMM table and looks a shape up in it (measured, interpolated between measured shapes, or refused);
``importer`` turns GEMM rows into a result document (``gpubench import --reference``); ``attention`` and ``comm``
read the attention and all-reduce tables a step profile needs; ``efficiency`` derives, from the GEMM curves, how
far each matrix's kernel falls short of the spec sheet's roofline (the analytic profile's and decode's basis).
"""
