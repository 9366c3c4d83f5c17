"""What a settings model's field says besides its type, for every model a user fills: the
commands' options (situate.pipeline.options, situate.cli.options) and the Retriever's configuration
(situate.api.config). `Flag` is how the field appears on the command line, `FromSetting` the
`SITUATE_*` setting that fills it when left empty; `Settled` is a frozen model that fills those
fields from the settings when it is made, so a value is resolved once, where it is used."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.fields import FieldInfo

from situate.core.settings import Settings, get_settings

T = TypeVar("T")


@dataclass(frozen=True)
class Flag:
    """How a field appears on the command line: `names` ("--context"), none for a positional
    argument; `negate` for a True default a flag turns off (`--no-prune`); `choices` names the
    values help lists (from a registry, so help cannot drift); `strict` also refuses others."""

    names: tuple[str, ...] = ()
    metavar: str | None = None
    negate: bool = False
    choices: Callable[[], Sequence[str]] | None = None
    strict: bool = False
    hint: str = ""  # after the choices in help, e.g. "or name:model"
    default_text: str = ""  # the default, in words, where the value alone would not say it


@dataclass(frozen=True)
class FromSetting:
    """The `SITUATE_*` setting that fills the field when it is left empty."""

    name: str
    value: Callable[[Settings], Any] | None = None  # how to read it, when not the attribute

    @property
    def env(self) -> str:
        return f"SITUATE_{self.name.upper()}"

    def read(self, settings: Settings) -> Any:
        return self.value(settings) if self.value else getattr(settings, self.name)


def from_settings(description: str | None = None, **constraints: Any) -> Any:
    """The default of a field a setting fills: empty (None) until the model is built, then the
    setting's value (`Settled`), so the field's type is its value's. The description, when the
    field's type does not carry it."""
    if description is not None:
        constraints["description"] = description
    return Field(None, **constraints)


def meta(field: FieldInfo, kind: type[T]) -> T | None:
    """The field's marker of `kind` (a Flag, a FromSetting), None without one."""
    return next((m for m in field.metadata if isinstance(m, kind)), None)


class Settled(BaseModel):
    """A frozen model with no unknown field, whose empty `FromSetting` fields are filled from
    the settings when it is made."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @model_validator(mode="before")
    @classmethod
    def _fill_from_settings(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        settings = None
        filled = dict(data)
        for name, field in cls.model_fields.items():
            source = meta(field, FromSetting)
            if source is not None and filled.get(name) in (None, ""):  # a form's blank too
                settings = settings or get_settings()
                filled[name] = source.read(settings)
        return filled


def shown_default(field: FieldInfo, flag: Flag | None, setting: FromSetting | None) -> str:
    """A field's default as help and the configuration table say it: the flag's own words, the
    setting's default, or the field's."""
    if flag is not None and flag.default_text:
        return flag.default_text
    if setting is not None:
        default = Settings.model_fields[setting.name].default
        return {"context": "anthropic if ANTHROPIC_API_KEY is set, else structural"}.get(
            setting.name, str(default))
    if field.default is None or field.is_required():
        return "none" if field.default is None else "required"
    return str(field.default).lower() if isinstance(field.default, bool) else str(field.default)


__all__ = ["Flag", "FromSetting", "Settled", "shown_default", "from_settings", "meta"]
