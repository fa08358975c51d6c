from tests.metadata_servers import clock, gce, imds

__all__ = ["clock", "gce", "imds"]
