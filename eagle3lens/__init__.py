"""eagle3lens: forensic debugging of EAGLE-3 speculative-decoding draft models."""

__version__ = "0.1.0"

from .errors import CheckpointError, ConversionRefused, Eagle3LensError, UsageError  # noqa: E402
from .findings import Finding, Report, Severity  # noqa: E402

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
