"""The six actors, the runtime they share, and their engines."""
