"""headroom's version, in the wire package because both sides state it: the agent in
every report (``NodeReport.agent_version``), the extender in its API and ``--version``.
``extender.__version__`` re-exports it; keep it equal to ``version`` in pyproject.toml."""

__version__ = "0.1.0"
