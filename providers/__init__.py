"""Cloud providers behind one narrow Protocol (``spotfleet.providers.base``).

One module per cloud: ``local`` (real local processes), ``fake`` (unit tests),
and the cloud adapters. Installed, this package imports as
``spotfleet.providers``.
"""
