"""tb-kineto-insights: why is my GPU job slow? Kineto trace analysis for TensorBoard."""

__version__ = "0.1.0"
