"""Step profiles built without timing this device: ``analytic`` (a SKU's analytic basis, or a sweep's fits) and
``reference`` (a reference database's kernel times on a SKU).  Both fill the same ``profile_doc.StepProfile`` as a
measured profile, so simulate and plan read any of them.  ``engine_time``: whose engine time a profile's steps carry
(an engine preset's, recorded in an analytic or reference profile, or a calibrated profile's fitted terms).
"""
