"""Built-in hardware presets: one TOML file per machine (see tracekit.replayer.simulation.hardware).

Every number carries its source in a comment; values marked "assumed" are
engineering estimates, not vendor figures.  Presets set
``fit_to_world_size = true``: the outermost (inter-node) dimension is resized
to the replayed trace set's world size.
"""
