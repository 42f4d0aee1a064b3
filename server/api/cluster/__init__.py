"""The cluster in the graph: its nodes and virtual clusters with what they hold and use, the
simulated file system, and the users admins manage."""
