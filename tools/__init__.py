"""The top layer: what a person runs.

The CLI (`voxweft`) and its commands (interpret, tap and replay, watch, captions, models,
languages, voicecheck) and the bench (`tools.bench`).
"""
