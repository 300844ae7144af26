"""Per-rank timelines (PERSEUS_TIMELINE, start_timeline()) into one Chrome/Perfetto trace."""
from perseus.timeline.merge import merge_files

__all__ = ["merge_files"]
