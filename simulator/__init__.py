"""The local cluster simulator on Docker: nodes, placement, ports, containers."""
