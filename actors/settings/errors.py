"""A settings file's validation errors as one line that names the file and the key at fault.

pydantic reports every error of a nested file (tables of tables), in its own order; a person
needs the first one that matters, said once: `FILE: actors.asr.engine: ...`. Used for the
topology file (actors.settings.topology); knows nothing of what the tables hold.
"""

from __future__ import annotations

from typing import get_args, get_origin

from pydantic import BaseModel

from voxweft.actors.settings.base import describe


class FileErrors:
    """One line for the errors of a file validated by `root`.

    `table_models`: the models whose unknown keys are misspelt *tables* (the file's and a
    table of tables'), reported before the errors of the table they are in.
    """

    def __init__(self, root: type[BaseModel], table_models: tuple[type[BaseModel], ...]) -> None:
        self.root = root
        self.table_models = table_models
        self.top_keys = tuple(root.model_fields)   # in the order their errors are reported

    def table_of(self, loc: tuple) -> tuple[type[BaseModel], int]:
        """The innermost table (model) on the way to `loc`, and how many parts lead there."""
        model, length, annotation = self.root, 0, self.root
        for i, part in enumerate(loc):
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                declared = annotation.model_fields.get(str(part))
                annotation = declared.annotation if declared is not None else None
            elif get_origin(annotation) is dict:
                annotation = get_args(annotation)[1]   # an entry of a table of tables
            else:
                break
            if isinstance(annotation, type) and issubclass(annotation, BaseModel):
                model, length = annotation, i + 1
        return model, length

    def unknown_table(self, error: dict) -> bool:
        """An unknown key of the file or of a table of tables: a misspelt table."""
        return (error["type"] == "extra_forbidden"
                and self.table_of(error["loc"][:-1])[0] in self.table_models)

    def rank(self, error: dict) -> tuple[int, int]:
        """Where an error comes in the file: its unknown tables first, then table by table.

        pydantic reports unknown keys after the fields; a misspelt table would then read as
        a missing one, so an unknown table comes before the errors of the table it is in.
        """
        loc, unknown = error["loc"], self.unknown_table(error)
        if unknown and len(loc) == 1:
            return 0, 0
        keys = self.top_keys
        return (keys.index(loc[0]) + 1 if loc else len(keys) + 1), (0 if unknown else 1)

    def line(self, source: str, errors: list[dict]) -> str:
        """The first error (see `rank`), as one line naming the file and the key."""
        error = min(errors, key=self.rank)
        loc, kind = tuple(error["loc"]), error["type"]
        if kind == "missing":          # only tables without a default can be missing
            return f"{source}: missing table [{'.'.join(loc)}]"
        model, length = self.table_of(loc[:-1] if kind == "extra_forbidden" else loc)
        # A table where a model is (pipeline, hosts.NAME, actors, actors.NAME) or a top one
        if kind in ("model_type", "dict_type") and (length == len(loc) or len(loc) == 1):
            return f"{source}: {'.'.join(loc)} = {error.get('input')!r:.40} must be a table"
        text = describe(model, {**error, "loc": loc[length:]})
        if not length:                 # a rule of the file: its line names the key
            return f"{source}: {text}"
        where = f"{source}: {'.'.join(str(part) for part in loc[:length])}"
        return f"{where}{': ' if text.startswith('unknown key') else '.'}{text}"
