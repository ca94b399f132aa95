"""Reusable stream operators: each is a function over Spark DataFrames with its semantics in its docstring."""
