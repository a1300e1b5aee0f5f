"""Topologies and supervisord rendering; nothing here runs a model."""
