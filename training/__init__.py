"""The training program around the method: command line, data, batches, run directory, reports."""
