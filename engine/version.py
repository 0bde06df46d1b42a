"""The engine's version: ``deltaplane --version`` prints it and every commit's ``engineInfo``
names it (``deltaplane/<version>``). A module of its own, so that asking costs nothing."""

ENGINE_VERSION = "0.1.0"
