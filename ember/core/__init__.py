"""The loop and the plugin machinery. Reaches plugins only through the plugin manager."""
