"""The experiment catalog: YAML specs in this folder, validated by :class:`SweepSpec`."""
from search_spaces.catalog import (SpecError, catalog, load_catalog_spec, load_spec, parse_set_options, parse_spec_text,
                                  spec_from_mapping, spec_path)
from search_spaces.plan import LrSearch, Plan, packs
from search_spaces.schema import SweepSpec

__all__ = ["LrSearch", "Plan", "SpecError", "SweepSpec", "catalog", "load_catalog_spec", "load_spec", "packs",
           "parse_set_options", "parse_spec_text", "spec_from_mapping", "spec_path"]
