"""One run as one phase invocation sees it: the record read once, its settings validated once, and its backend
adapter, its resolved inputs and the adapter's ``RunContext`` each built once, on first use.

A phase builds its view from the record its first registry call returned and hands the view on (to the health poll,
early stop, the evaluation loop), so nothing in one invocation reads the record or validates ``RunSettings`` again.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from typing import Any

from mtrl.contracts.backend import BackendAdapter, CreatedResource, RunContext
from mtrl.contracts.errors import ConfigurationError, InternalError
from mtrl.runs.adapters import adapter_for
from mtrl.runs.manifest import RunSettings
from mtrl.runs.phases.inputs import ResolvedInputs, stored_inputs
from mtrl.runs.runtime import Runtime

# What a view keeps when the phase hands it a newer record: neither changes after Register.
_KEPT_ON_UPDATE = ("settings", "adapter")


class RunView:
    def __init__(self, runtime: Runtime, record: Mapping[str, Any]) -> None:
        self.runtime = runtime
        self.record = record

    @property
    def run_id(self) -> str:
        return str(self.record["run_id"])

    @functools.cached_property
    def settings(self) -> RunSettings:
        """The settings Register resolved from the manifest and stored on the record (read, never re-resolved)."""
        if not self.record.get("settings"):  # Register failed before storing them
            raise ConfigurationError(f"run {self.run_id} has no valid settings")
        return RunSettings.model_validate(self.record["settings"])

    @functools.cached_property
    def adapter(self) -> BackendAdapter:
        return adapter_for(self.settings.backend)

    @functools.cached_property
    def inputs(self) -> ResolvedInputs:
        return stored_inputs(self.run_id, self.record)

    @functools.cached_property
    def context(self) -> RunContext:
        """What the backend adapter sees: the run's resolved inputs and the resources recorded so far."""
        run_id = self.run_id
        registry = self.runtime.registry
        if self.inputs.settings is None:
            raise InternalError(f"run {run_id}: the record has no effective settings (Preflight stores them)")
        return RunContext(
            run_id=run_id,
            settings=dict(self.inputs.settings),
            dataset_uri=self.inputs.dataset_uri,
            eval_dataset_uri=self.inputs.eval_dataset_uri,
            output_uri=self.inputs.output_uri,
            resources=tuple(
                CreatedResource(kind=r["kind"], identifier=r["identifier"], details=r.get("details") or {})
                for r in self.record["resources"]
                if "removed_at" not in r
            ),
            record_resource=lambda resource: registry.record_resource(run_id, resource),
        )

    def updated(self, record: Mapping[str, Any]) -> RunView:
        """The view of a newer version of the record (e.g. after the adapter recorded resources, or Preflight stored
        the effective settings): the settings and the adapter are kept, the inputs and the context are built again."""
        view = RunView(self.runtime, record)
        for name in _KEPT_ON_UPDATE:
            if name in self.__dict__:
                view.__dict__[name] = self.__dict__[name]
        return view
