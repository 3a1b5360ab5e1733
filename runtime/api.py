"""The runtime as the desktop app sees it: every name app/ uses, re-exported from the module that owns
it, so the app has one import surface (`from runtime.api import ...`) and a move inside runtime/ is
one line here. tests/test_boundaries.py keeps app/ to it.

The app already loads the engine at start (its worker holds one), so importing everything here costs
nothing the app would not pay; it joins the inference core and the model store, as the commands do.
"""

from __future__ import annotations

from . import options
from .cache import cache_bytes
from .chat_engine import ChatEngine, TokenCounter
from .chat_format import ChatFormat
from .checkpoint.reader import LoadCancelled, LoadProgress
from .controls import Controls
from .depth import DepthLevel, find_level, level_names, lower_level, table_default_level, usable_level
from .engine import Engine, EngineStatus
from .engine_queue import EngineQueue, stream_in_turn
from .errors import ElasticError, UsageError, for_approval, one_line, printable, show
from .events import (
    END_OF_TURN,
    ENDED_BY_USER,
    ERROR,
    LENGTH,
    RECORD_FIELDS,
    STOP_STRING,
    STOPPED,
    SWITCH_TEXT_FIELDS,
    Done,
    Event,
    Progress,
    Switch,
    Token,
)
from .generate import ChatRequest
from .json_file import JsonFileError, read_json_file
from .mcp.approvals import APPROVALS_FILE, Approvals
from .mcp.client import McpError, McpManager
from .mcp.config import (
    CONFIG_FILE,
    ConfigError,
    McpConfig,
    ServerConfig,
    bundled_calculator,
    merge_imported,
    parse_server,
    read_config,
    write_config,
)
from .native import describe, is_panic
from .options import (
    ALLOW_HOSTS,
    ALLOW_ORIGINS,
    CONTEXT,
    CONTEXT_OVERFLOW,
    MAX_NEW_TOKENS,
    MAX_TOOL_CALLS,
    MIN_P,
    PORT,
    SAMPLING,
    TEMPERATURE,
    TOOL_TIMEOUT,
    TOP_K,
    TOP_P,
    Option,
    OptionError,
    refusal,
)
from .paths import (
    LOG_FILE,
    MAX_SOCKET_PATH,
    data_dir,
    default_models_dir,
    instance_name,
    log_file,
    models_dir,
    socket_file_name,
    socket_folders,
    use_models_dir,
)
from .placement import ExpertPlacement
from .private_files import make_private_folder, open_append, private_before_open, read_bounded, read_tail, write_private
from .remote.client import RemoteServer
from .remote.continuation import CANNOT_CONTINUE
from .remote.engine import RemoteEngine
from .remote.engine import list_models as list_server_models
from .remote.models import choices as server_model_choices
from .reply_record import Continuation
from .sampling import SamplingSettings
from .server.access_rules import is_loopback, valid_api_key
from .server.request_log import RequestEntry, RequestLog
from .server.runner import PortTaken, ServerThread
from .server.serving import served_model_id
from .store.catalog import load_catalog
from .store.download.destination import check_destination
from .store.download.hub_files import MetadataStopped
from .store.download.transfer import CANCELLED, PAUSED, Download, DownloadProgress, hub_token, resolve
from .store.hardware import HardwareProbe, load_probe, probe
from .store.model_store import delete, download_dir, import_folder, list_models, name_of, verify
from .store.nesting.slice_check import catalog_slices, check_catalog_slices, check_slice
from .store.planner import NO, check_cpu_fit, checkpoint_sizing, fit_submodel, make_plan, plan_checkpoint
from .store.remote_sources import add_source, is_spec, load_sources, parse_spec, read_key, remove_source, where_keys_go
from .store.submodel_tables import folder_table
from .threads import apply as apply_threads
from .tool_loop import (
    ALLOW_IN_CHAT,
    ALLOW_ONCE,
    DECLINE,
    ChatTools,
    PendingCall,
    consent_key,
    describe_arguments,
    replay_messages,
    run_tool_loop,
    saved_rounds,
)
from .units import counted, format_bytes

__all__ = [
    "ALLOW_HOSTS", "ALLOW_IN_CHAT", "ALLOW_ONCE", "ALLOW_ORIGINS", "APPROVALS_FILE", "Approvals", "CANCELLED",
    "CONFIG_FILE", "CONTEXT", "CONTEXT_OVERFLOW", "ChatEngine", "ChatFormat", "ChatRequest", "ChatTools",
    "ConfigError", "Controls", "DECLINE", "DepthLevel", "Done", "Download", "DownloadProgress", "ENDED_BY_USER",
    "END_OF_TURN", "ERROR", "ElasticError", "Engine", "EngineQueue", "EngineStatus", "Event", "ExpertPlacement",
    "HardwareProbe", "JsonFileError", "LENGTH", "LOG_FILE", "LoadCancelled", "LoadProgress", "MAX_NEW_TOKENS",
    "MAX_SOCKET_PATH", "MAX_TOOL_CALLS", "MIN_P", "McpConfig", "McpError", "McpManager", "MetadataStopped", "NO",
    "Option", "OptionError", "PAUSED", "PORT", "PendingCall", "PortTaken", "Progress", "RECORD_FIELDS",
    "RemoteEngine", "RemoteServer", "RequestEntry", "RequestLog", "SAMPLING", "STOPPED", "STOP_STRING",
    "SWITCH_TEXT_FIELDS", "SamplingSettings", "ServerConfig",
    "ServerThread", "Switch", "TEMPERATURE", "TOOL_TIMEOUT", "TOP_K", "TOP_P", "Token", "TokenCounter", "UsageError",
    "add_source", "annotations", "apply_threads", "bundled_calculator", "cache_bytes", "catalog_slices",
    "check_catalog_slices", "check_cpu_fit", "check_destination", "check_slice", "checkpoint_sizing", "consent_key",
    "data_dir", "default_models_dir", "delete", "describe", "describe_arguments", "download_dir", "find_level",
    "fit_submodel", "folder_table", "for_approval", "format_bytes", "hub_token", "import_folder", "instance_name",
    "is_loopback", "is_panic", "is_spec", "level_names", "list_models", "list_server_models", "load_catalog",
    "load_probe", "load_sources", "log_file", "lower_level", "make_plan", "make_private_folder", "merge_imported",
    "models_dir", "name_of", "one_line", "open_append", "options", "parse_server", "parse_spec", "plan_checkpoint",
    "printable",
    "private_before_open", "probe", "read_bounded", "read_config", "read_json_file", "read_key", "read_tail",
    "refusal", "remove_source", "replay_messages", "resolve", "run_tool_loop", "saved_rounds", "server_model_choices",
    "show", "socket_file_name", "socket_folders", "stream_in_turn", "table_default_level", "usable_level",
    "use_models_dir", "valid_api_key", "verify", "where_keys_go", "write_config", "write_private",
    "counted", "served_model_id", "Continuation", "CANNOT_CONTINUE",
]
