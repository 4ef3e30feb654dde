"""SM profiler: ProfileRecord -> spans -> trace.json / gantt.html / gantt.png / summary.

Only the record format is imported here (numpy only); renderers import matplotlib on use.
"""
from profiler.record import ProfileFormatError, ProfileRecord, load_npz, save_npz

__all__ = ["ProfileFormatError", "ProfileRecord", "load_npz", "save_npz"]
