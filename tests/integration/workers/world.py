"""Moved to tests/integration/scheduling/world.py; this name stays for the modules that still
import it (tests/integration/backends/test_workers_on_kubernetes.py) until they import the
new one."""

from tests.integration.scheduling.world import DEFAULT_CLASSES, World, make_world, request

__all__ = ["DEFAULT_CLASSES", "World", "make_world", "request"]
