"""Strategies: how work is spread over processes."""
