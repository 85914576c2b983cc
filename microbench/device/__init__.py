"""Which device to measure and what it is: discovery, the device and host record (provenance), and
whether something else is using it.
"""
