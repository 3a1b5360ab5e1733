"""A JSON schema's references, checked before any work: every `$ref` points at a schema inside the
same schema, and every schema the answer may have to follow has a finite value.

Why: llguidance compiles `$ref`s lazily, so a cycle of references (`{"$ref": "#"}`, a -> b -> a) or an
endless required chain (an object whose required property is that object again, an array of at
least one of itself) compiled, the prompt ran, and the first mask failed: a 500 after the work,
differently on each route. `check_refs` runs inside grammar.check_schema, which every route's schema
goes through, so each of them refuses such a schema with the same 400.

A schema has a finite value when all it requires does (its `$ref`, each `allOf`, one branch of its
`anyOf` / `oneOf`, and for one of its types the required properties or the first `minItems` items).
That is the least fixed point over the schema's nodes, computed with a work list (each node and each
edge is looked at a bounded number of times: linear in the schema's size, however long its chains).
"""

from __future__ import annotations

from urllib.parse import unquote

from .errors import show

MAPS = ("properties", "$defs", "definitions")
LISTS = ("anyOf", "oneOf", "allOf", "prefixItems")
VALUES = ("items", "additionalProperties")
ENDLESS = ("refers back to itself without end (a $ref cycle, or a required property, item or branch that "
           "always leads back), so no finite value follows it; end the recursion: make it optional (not "
           "required, minItems 0, or anyOf with a null)")


class SchemaRefError(ValueError):
    """`where` (a path such as `response_format.json_schema.schema.$defs.a`) and what is wrong there."""

    def __init__(self, where: str, message: str):
        super().__init__(f"{where}: {message}")
        self.where, self.message = where, message


def check_refs(schema: dict, where: str) -> None:
    """SchemaRefError unless each `$ref` resolves and each schema the root uses has a finite value.
    `schema` has passed grammar.check_schema's walk (bounded size and depth, known keywords)."""
    graph = _Graph(schema, where)
    finite = graph.finite()
    for node in graph.used():
        if isinstance(node, dict) and id(node) not in finite:
            raise SchemaRefError(graph.paths[id(node)], ENDLESS)


class _Graph:
    """The schema's nodes (by id) as an AND-OR graph: a node needs all its needs; a choice needs one."""

    def __init__(self, root: dict, where: str):
        self.root, self.paths = root, {}
        self.nodes: dict[int, object] = {}  # id -> schema node (a dict, or true / false)
        self.refs: dict[int, dict | bool] = {}  # id of a node with $ref -> the node it points at
        self._add(root, where)
        for key, node in list(self.nodes.items()):
            if isinstance(node, dict) and "$ref" in node:
                self.refs[key] = self._resolve(node["$ref"], f"{self.paths[key]}.$ref")

    def _add(self, node, path: str) -> None:
        """Every schema node of the tree, with its path (the walk before bounded the depth)."""
        self.nodes[id(node)] = node
        self.paths[id(node)] = path
        if not isinstance(node, dict):
            return
        for key, value in node.items():
            if key in MAPS and isinstance(value, dict):
                for name, sub in value.items():
                    self._add(sub, f"{path}.{key}.{name}")
            elif key in LISTS and isinstance(value, list):
                for i, sub in enumerate(value):
                    self._add(sub, f"{path}.{key}[{i}]")
            elif key in VALUES and isinstance(value, dict | bool):
                self._add(value, f"{path}.{key}")

    def _resolve(self, ref: str, where: str):
        """The node a `#...` JSON pointer names; SchemaRefError when it names no schema of this one."""
        if ref != "#" and not ref.startswith("#/"):
            raise SchemaRefError(where, f"{show(ref, 80)} is not a JSON pointer such as #/$defs/name")
        node = self.root
        for part in ref[2:].split("/") if ref != "#" else ():
            part = unquote(part).replace("~1", "/").replace("~0", "~")
            if isinstance(node, dict) and part in node:
                node = node[part]
            elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
                node = node[int(part)]
            else:
                raise SchemaRefError(where, f"{show(ref, 80)} points at nothing in the schema")
        if id(node) not in self.nodes:
            raise SchemaRefError(where, f"{show(ref, 80)} points at something that is not a schema")
        return node

    # ------------------------------------------------------------------ what each node needs

    def _needs(self, node) -> list[list]:
        """What `node` needs, as choices: every choice must be met, each by one of its keys. A node of
        several types that need something gets one key per type (`(id, kind)`), whose needs are that
        type's. `false` counts as met: a schema that needs it has no value either, but that is no
        recursion, and the grammar's own checks name it better (a required name that is no property)."""
        if isinstance(node, bool):
            return []
        needs = [[id(self.refs[id(node)])]] if id(node) in self.refs else []
        needs += [[id(sub)] for sub in node.get("allOf", [])]
        needs += [[id(sub) for sub in node[key]] for key in ("anyOf", "oneOf") if key in node]
        if "const" in node or "enum" in node:
            return needs  # a literal value: finite whatever its type says
        kind = node.get("type")
        kinds = [kind] if isinstance(kind, str) else kind if isinstance(kind, list) else []
        by_kind = {k: self._type_needs(node, k) for k in kinds if isinstance(k, str)}
        if by_kind and all(by_kind.values()):  # only types that need something: one of them must be met
            for k, subs in by_kind.items():
                self.typed[(id(node), k)] = [[id(sub)] for sub in subs]
            needs.append([(id(node), k) for k in by_kind])
        return needs

    @staticmethod
    def _type_needs(node: dict, kind: str) -> list:
        """The nodes a value of `kind` under `node` must hold: its required properties, its first items."""
        if kind == "object":
            props = node.get("properties", {}) if isinstance(node.get("properties"), dict) else {}
            extra = node.get("additionalProperties", True)
            return [props[r] if r in props else extra for r in node.get("required", [])]
        if kind == "array":
            least = node.get("minItems", 0) if isinstance(node.get("minItems", 0), int) else 0
            prefix = node.get("prefixItems", []) if isinstance(node.get("prefixItems"), list) else []
            return list(prefix[:least]) + ([node.get("items", True)] if least > len(prefix) else [])
        return []

    # ------------------------------------------------------------------ the fixed point

    def finite(self) -> set:
        """The keys of the nodes that have a finite value (a work list: linear in nodes and edges)."""
        self.typed: dict = {}
        needs = {key: self._needs(node) for key, node in self.nodes.items()}
        for extra in (True, False):  # a true / false reached by a type's needs
            needs.setdefault(id(extra), self._needs(extra))
        needs.update(self.typed)
        unmet = {key: len(choices) for key, choices in needs.items()}
        users: dict = {}  # key -> [(the key of a node it helps, the index of that node's choice)]
        for key, choices in needs.items():
            for i, choice in enumerate(choices):
                for sub in choice:
                    users.setdefault(sub, []).append((key, i))
        work = [key for key, n in unmet.items() if n == 0]
        done, met = set(work), set()
        while work:
            key = work.pop()
            for user, i in users.get(key, ()):
                if (user, i) in met:
                    continue
                met.add((user, i))
                unmet[user] -= 1
                if unmet[user] == 0:
                    done.add(user)
                    work.append(user)
        return done

    def used(self) -> list:
        """The schemas the root may have to follow: itself and what it reaches (not unused $defs)."""
        seen, work, out = {id(self.root)}, [self.root], []
        while work:
            node = work.pop()
            out.append(node)
            if not isinstance(node, dict):
                continue
            subs = [self.refs[id(node)]] if id(node) in self.refs else []
            for key, value in node.items():
                if key == "properties" and isinstance(value, dict):
                    subs += value.values()
                elif key in LISTS and isinstance(value, list):
                    subs += value
                elif key in VALUES and isinstance(value, dict | bool):
                    subs.append(value)
            for sub in subs:
                if id(sub) not in seen:
                    seen.add(id(sub))
                    work.append(sub)
        return out
