"""Moved: the config writer is ``eagle3lens.engines.config_writer`` (beside the engines whose configs it writes);
kept for one release."""

from .engines.config_writer import CONFIG_WRITERS, ConfigJob, convert_config, rewrite_aux_ids

__all__ = ["CONFIG_WRITERS", "ConfigJob", "convert_config", "rewrite_aux_ids"]
