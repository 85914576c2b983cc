"""Which packages the wheel holds; everything else is in pyproject.toml.

Every package under microbench/ and roofline/ is found, never listed by hand: a hand-kept list once left out a
room (roofline.fleet) and every non-editable install failed at start-up.  profiles/ is a data folder with no
``__init__.py``; it is installed as the package ``gpubench_profiles`` (pyproject.toml's package-dir).
tests/test_packaging.py builds the wheel and checks both.
"""

from setuptools import find_packages, setup

setup(packages=find_packages(include=["microbench", "microbench.*", "roofline", "roofline.*"])
      + ["gpubench_profiles"])
