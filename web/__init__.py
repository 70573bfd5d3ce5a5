"""The explorer's static edition: the shipped models exported to ONNX, run in the visitor's browser."""
