"""Verification: the compiled weights against the circuit (:mod:`check`, the lock-step
differential check of an engine against the reference simulator, lane by lane with the
compiler's lane map). It stands on the compiler and the engines; nothing below imports it.
"""
