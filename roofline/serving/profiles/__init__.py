"""Step profiles built without timing this device: ``analytic`` (a SKU's analytic basis, or a sweep's fits) and
``reference`` (a reference database's kernel times on a SKU).  Both fill the same ``profile_doc.StepProfile`` as a
measured profile, so simulate and plan read any of them.
"""
