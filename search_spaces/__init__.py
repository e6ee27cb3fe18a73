"""The experiment catalog: YAML specs in this folder, validated by :class:`SweepSpec`."""
from search_spaces.catalog import SpecError, catalog, load_spec, parse_set_options, spec_path
from search_spaces.schema import GRID_AXES, SweepSpec

__all__ = ["GRID_AXES", "SpecError", "SweepSpec", "catalog", "load_spec", "parse_set_options", "spec_path"]
