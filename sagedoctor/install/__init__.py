"""Carrying out a Plan: package installs, downloads, source builds, the runtime bundle."""
