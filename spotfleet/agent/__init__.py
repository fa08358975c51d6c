"""The node agent: runs jobs on one instance, watches for interruption notices
and tells the jobs to checkpoint (``notices``, ``signals``, ``progress``)."""
