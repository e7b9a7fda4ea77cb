"""eagle3lens: forensic debugging of EAGLE-3 speculative-decoding draft models."""

from ._version import __version__
from .errors import CheckpointError, ConversionRefused, Eagle3LensError, UsageError
from .findings import Finding, Report, Severity

__all__ = [
    "__version__",
    "CheckpointError",
    "ConversionRefused",
    "Eagle3LensError",
    "UsageError",
    "Finding",
    "Report",
    "Severity",
]
