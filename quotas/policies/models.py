"""Policies as code (CEL): see the policies issue."""
