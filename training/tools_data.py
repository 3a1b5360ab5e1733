"""Tools the demo model is offered in training, and the held-out ones it is evaluated on.

An arithmetic tool takes the expression as text ("145+23"); its name, its parameter's name and both
descriptions vary a lot (built from parts, plus made-up names), so the model learns to copy them
from the system turn rather than to remember a few. Other tools (weather, search, e-mail...) are
offered beside it or alone: the model must pick the arithmetic one, or see that there is none.

Held out, for the evaluation only: a list of arithmetic tools (names, parameter names and
descriptions) and of other tools that the builders here can never produce (`training_tool`
refuses them), so a model that calls them correctly has read them, not remembered them.
"""

from __future__ import annotations

import random

# ----------------------------------------------------------------------------- arithmetic tools

VERBS = ["add", "compute", "calculate", "calc", "eval", "evaluate", "solve", "do", "run", "work_out", "get", "find"]
NOUNS = ["sum", "math", "arithmetic", "expression", "numbers", "total", "result", "calc", "value", "maths"]
SINGLE_NAMES = ["calculator", "calc", "adder", "math", "arith", "sums", "mathtool", "arithmetic", "summer",
                "numbers", "compute", "eval_expr", "expr_eval", "mini_calc", "math_helper", "calc_tool"]
PARAM_NAMES = ["expression", "expr", "input", "query", "formula", "calculation", "math", "problem", "text",
               "sum", "equation", "numbers", "x", "q", "arith", "task", "question_text", "calc_input"]
DESCRIPTION_HEADS = ["Adds and subtracts whole numbers", "Evaluates an arithmetic expression",
                     "Computes a sum of whole numbers", "Calculates the value of an expression",
                     "Works out additions and subtractions", "Solves a math expression with + and -",
                     "A calculator for + and -", "Does integer arithmetic", "Adds and subtracts numbers of any size",
                     "Evaluates sums and differences", "Calculator", "Arithmetic on whole numbers",
                     "Computes the result of numbers joined by + and -"]
DESCRIPTION_TAILS = ["", "", " Returns the result.", " Any size of numbers.", " Negative results are fine.",
                     " Use it for big numbers.", " Returns a number.", " Exact."]
PARAM_DESCRIPTIONS = ["The expression to evaluate, like 12+7-3.", "Numbers joined by + and -.",
                      "The sum to work out.", "An arithmetic expression.", "What to calculate, e.g. 145+23.",
                      "The math expression.", "Expression, for example 1200-45+7.", "Text of the calculation."]

# Held out: none of these names, parameter names or descriptions is ever produced for training.
HELD_OUT_TOOLS = [
    ("evaluate_arithmetic", "Evaluates additions and subtractions of whole numbers and returns the value.",
     "arithmetic_expression", "The arithmetic to do, such as 250+38."),
    ("quick_math", "Quick math: adds and subtracts integers.", "math_input", "A sum with + and - signs."),
    ("number_cruncher", "Calculates exact results for sums of numbers of any size.", "calc_text",
     "Numbers with + or - between them."),
    ("sumTool", "Computes totals of numbers joined by plus and minus.", "sumExpression",
     "The expression, for example 99+101."),
    ("abacus", "An abacus: evaluates expressions made of + and -.", "problem_text", "What to work out."),
    ("mathEngine", "Evaluates math expressions of addition and subtraction.", "expressionText",
     "The full expression to calculate."),
    ("do_sum", "Works out the result of a sum or a difference.", "the_sum", "Sum to evaluate, like 7-12."),
    ("arith_eval", "Integer calculator: + and - only, any size.", "formula_text", "An expression such as 1000-1."),
]
HELD_OUT_OTHER = [
    ("fetch_stock_price", "Looks up the latest price of a stock.", "ticker", "The stock symbol, like NVDA."),
    ("open_map", "Shows a place on a map.", "place", "Name or address of the place."),
    ("book_table", "Books a table at a restaurant.", "restaurant", "The restaurant's name."),
    ("spell_check", "Checks the spelling of a text.", "passage", "The text to check."),
]

# ----------------------------------------------------------------------------- other tools

OTHER_TOOLS = [
    ("get_weather", "Gets the current weather for a city.", "city", "The city name."),
    ("search_web", "Searches the web and returns the top results.", "query", "What to search for."),
    ("send_email", "Sends an e-mail.", "to", "The address to send to."),
    ("read_file", "Reads a text file from disk.", "path", "The file's path."),
    ("translate_text", "Translates text into another language.", "text", "The text to translate."),
    ("get_time", "Returns the current time in a time zone.", "timezone", "A time zone like Europe/Paris."),
    ("create_event", "Adds an event to the calendar.", "title", "The event's title."),
    ("lookup_word", "Looks a word up in the dictionary.", "word", "The word."),
    ("play_music", "Plays a song.", "song", "The song's title."),
    ("list_files", "Lists the files in a folder.", "folder", "The folder's path."),
    ("get_news", "Returns today's headlines.", "topic", "A topic, like sports."),
    ("set_timer", "Starts a timer.", "minutes", "How long, in minutes."),
    ("wiki_summary", "Summarizes a Wikipedia article.", "title", "The article's title."),
    ("run_shell", "Runs a shell command.", "command", "The command line."),
]

HELD_OUT_NAMES = {t[0] for t in HELD_OUT_TOOLS + HELD_OUT_OTHER}
HELD_OUT_PARAMS = {t[2] for t in HELD_OUT_TOOLS + HELD_OUT_OTHER}
HELD_OUT_DESCRIPTIONS = ({t[1] for t in HELD_OUT_TOOLS + HELD_OUT_OTHER}
                         | {t[3] for t in HELD_OUT_TOOLS + HELD_OUT_OTHER})


def tool_definition(name: str, description: str, param: str, param_description: str, param_type: str = "string",
                    optional: tuple | None = None) -> dict:
    """An OpenAI-style tool with one required parameter (and maybe an optional one)."""
    properties = {param: {"type": param_type, "description": param_description}}
    if optional:
        properties[optional[0]] = {"type": optional[1], "description": optional[2]}
    return {"type": "function", "function": {"name": name, "description": description,
                                             "parameters": {"type": "object", "properties": properties,
                                                            "required": [param]}}}


OPTIONAL_PARAMS = [("precision", "integer", "Digits after the point."), ("verbose", "boolean", "Explain the steps."),
                   ("format", "string", "How to write the result."),
                   ("base", "integer", "The number base, 10 by default.")]


def made_up(rng: random.Random, low: int = 2, high: int = 9) -> str:
    return "".join(rng.choice("abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(low, high)))


def _style(rng: random.Random, words: list[str]) -> str:
    """snake_case, camelCase or run together."""
    words = [w for part in words for w in part.split("_")]
    r = rng.random()
    if r < 0.6:
        return "_".join(words)
    if r < 0.85:
        return words[0] + "".join(w.capitalize() for w in words[1:])
    return "".join(words)


def arithmetic_tool(rng: random.Random) -> dict:
    """A training arithmetic tool: never one of the held-out names, parameters or descriptions."""
    while True:
        r = rng.random()
        if r < 0.5:
            name = _style(rng, [rng.choice(VERBS), rng.choice(NOUNS)])
        elif r < 0.7:
            name = rng.choice(SINGLE_NAMES)
        else:  # made up: only the description says what it does
            name = _style(rng, [made_up(rng)] + ([made_up(rng, 2, 5)] if rng.random() < 0.4 else []))
        param = rng.choice(PARAM_NAMES) if rng.random() < 0.75 else made_up(rng, 1, 8)
        description = rng.choice(DESCRIPTION_HEADS) + "." + rng.choice(DESCRIPTION_TAILS)
        description = description.replace("..", ".")
        param_description = rng.choice(PARAM_DESCRIPTIONS)
        if name not in HELD_OUT_NAMES and param not in HELD_OUT_PARAMS and name != param:
            break
    optional = rng.choice(OPTIONAL_PARAMS) if rng.random() < 0.2 else None
    return tool_definition(name, description, param, param_description, optional=optional)


def other_tool(rng: random.Random) -> dict:
    if rng.random() < 0.8:
        name, description, param, param_description = rng.choice(OTHER_TOOLS)
    else:  # a made-up name for a listed job
        _, description, param, param_description = rng.choice(OTHER_TOOLS)
        name = _style(rng, [made_up(rng), made_up(rng, 2, 6)])
        if name in HELD_OUT_NAMES:
            name = name + "_x"
    return tool_definition(name, description, param, param_description)


def offered_tools(rng: random.Random, arithmetic: float = 0.75) -> tuple[list[dict], int | None]:
    """One to three tools, and the index of the arithmetic one (None: there is none)."""
    n = rng.choice([1, 1, 2, 2, 3])
    tools, names = [], set()
    while len(tools) < n:
        t = other_tool(rng)
        if t["function"]["name"] not in names:
            names.add(t["function"]["name"])
            tools.append(t)
    if rng.random() < arithmetic:
        k = rng.randrange(n)
        tools[k] = arithmetic_tool(rng)
        return tools, k
    return tools, None


def held_out_tools(seed: int, n: int, others: tuple[int, ...] = (0, 1)) -> list[tuple[list[dict], int]]:
    """n tool lists for the evaluation: a held-out arithmetic tool, alone or beside held-out other tools
    (as many with each count in `others`), at any position; with the index of the arithmetic tool."""
    rng = random.Random(seed + 4243)
    out = []
    for i in range(n):
        name, description, param, param_description = HELD_OUT_TOOLS[i % len(HELD_OUT_TOOLS)]
        arith = tool_definition(name, description, param, param_description)
        tools = [tool_definition(*t) for t in rng.sample(HELD_OUT_OTHER, others[i % len(others)])]
        k = rng.randint(0, len(tools))
        tools.insert(k, arith)
        out.append((tools, k))
    return out


def required_param(tool: dict) -> str:
    return tool["function"]["parameters"]["required"][0]


def tool_name(tool: dict) -> str:
    return tool["function"]["name"]
