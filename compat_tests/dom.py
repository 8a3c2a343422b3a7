"""Reading a page's DOM (chromium --dump-dom) as a user reads it: the text of elements by
id, and tables (by id) as rows of cell texts.  Standard library only (html.parser)."""

from __future__ import annotations

from html.parser import HTMLParser

VOID = {"br", "hr", "img", "input", "link", "meta", "source", "wbr", "col", "area", "base"}


class _Doc(HTMLParser):
    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.stack: list[tuple[str, dict]] = []
        self.texts: dict[str, list[str]] = {}  # element id -> text parts
        self.open_ids: list[tuple[int, str]] = []
        self.tables: dict[str, list[list[str]]] = {}
        self._table: list[str | None] = []
        self._row: list[str] | None = None
        self._cell: list[str] | None = None
        self.tags: list[tuple[str, dict]] = []

    def handle_starttag(self, tag: str, attrs: list) -> None:
        a = dict(attrs)
        self.tags.append((tag, a))
        if tag in VOID:
            return
        self.stack.append((tag, a))
        if "id" in a:
            self.open_ids.append((len(self.stack), a["id"]))
            self.texts.setdefault(a["id"], [])
        if tag == "table":
            self._table.append(a.get("id"))
            if a.get("id"):
                self.tables[a["id"]] = []
        elif tag == "tr" and self._table and self._table[-1]:
            self._row = []
        elif tag in ("td", "th") and self._row is not None:
            self._cell = []

    def handle_endtag(self, tag: str) -> None:
        if tag in VOID:
            return
        if tag in ("td", "th") and self._cell is not None and self._row is not None:
            self._row.append(" ".join("".join(self._cell).split()))
            self._cell = None
        elif tag == "tr" and self._row is not None:
            if self._table and self._table[-1]:
                self.tables[self._table[-1]].append(self._row)
            self._row = None
        elif tag == "table" and self._table:
            self._table.pop()
        while self.stack:
            t, _ = self.stack.pop()
            while self.open_ids and self.open_ids[-1][0] > len(self.stack):
                self.open_ids.pop()
            if t == tag:
                break

    def handle_data(self, data: str) -> None:
        for _, ident in self.open_ids:
            self.texts[ident].append(data)
        if self._cell is not None:
            self._cell.append(data)


class Dom:
    def __init__(self, markup: str) -> None:
        self.markup = markup
        self._doc = _Doc()
        self._doc.feed(markup)
        self._doc.close()

    def text(self, ident: str) -> str:
        assert ident in self._doc.texts, f"no element #{ident} in the page"
        return " ".join("".join(self._doc.texts[ident]).split())

    def has(self, ident: str) -> bool:
        return ident in self._doc.texts

    def table(self, ident: str) -> list[list[str]]:
        """Rows of cell texts, the header row first."""
        assert ident in self._doc.tables, f"no table #{ident} in the page"
        return self._doc.tables[ident]

    def rows(self, ident: str) -> list[dict[str, str]]:
        head, *body = self.table(ident)
        return [dict(zip(head, r, strict=True)) for r in body]

    def elements(self, tag: str) -> list[dict]:
        return [a for t, a in self._doc.tags if t == tag]
