"""The node agent: runs on every instance, runs the jobs assigned to it, watches
the cloud's metadata service for notices and reports to the controller.

Import-light on purpose (httpx and pydantic only): it starts on every node.
"""
