"""What a person runs beside the pipeline: CLI, interpret, tap, replay."""
