from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ServiceProtocolVersion(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SERVICE_PROTOCOL_VERSION_UNSPECIFIED: _ClassVar[ServiceProtocolVersion]
    V1: _ClassVar[ServiceProtocolVersion]
    V2: _ClassVar[ServiceProtocolVersion]
    V3: _ClassVar[ServiceProtocolVersion]
    V4: _ClassVar[ServiceProtocolVersion]
    V5: _ClassVar[ServiceProtocolVersion]
    V6: _ClassVar[ServiceProtocolVersion]
    V7: _ClassVar[ServiceProtocolVersion]

class CombinatorType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    COMBINATOR_TYPE_UNKNOWN: _ClassVar[CombinatorType]
    FIRST_COMPLETED: _ClassVar[CombinatorType]
    ALL_COMPLETED: _ClassVar[CombinatorType]
    FIRST_SUCCEEDED_OR_ALL_FAILED: _ClassVar[CombinatorType]
    ALL_SUCCEEDED_OR_FIRST_FAILED: _ClassVar[CombinatorType]

class ErrorBehavior(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RETRY: _ClassVar[ErrorBehavior]
    PAUSE: _ClassVar[ErrorBehavior]
    FAIL: _ClassVar[ErrorBehavior]

class BuiltInSignal(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SIGNAL_UNKNOWN: _ClassVar[BuiltInSignal]
    CANCEL: _ClassVar[BuiltInSignal]
SERVICE_PROTOCOL_VERSION_UNSPECIFIED: ServiceProtocolVersion
V1: ServiceProtocolVersion
V2: ServiceProtocolVersion
V3: ServiceProtocolVersion
V4: ServiceProtocolVersion
V5: ServiceProtocolVersion
V6: ServiceProtocolVersion
V7: ServiceProtocolVersion
COMBINATOR_TYPE_UNKNOWN: CombinatorType
FIRST_COMPLETED: CombinatorType
ALL_COMPLETED: CombinatorType
FIRST_SUCCEEDED_OR_ALL_FAILED: CombinatorType
ALL_SUCCEEDED_OR_FIRST_FAILED: CombinatorType
RETRY: ErrorBehavior
PAUSE: ErrorBehavior
FAIL: ErrorBehavior
SIGNAL_UNKNOWN: BuiltInSignal
CANCEL: BuiltInSignal

class StartMessage(_message.Message):
    __slots__ = ("id", "debug_id", "known_entries", "state_map", "partial_state", "key", "retry_count_since_last_stored_entry", "duration_since_last_stored_entry", "random_seed", "scope", "limit_key", "idempotency_key")
    class StateEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: bytes
        value: bytes
        def __init__(self, key: _Optional[bytes] = ..., value: _Optional[bytes] = ...) -> None: ...
    ID_FIELD_NUMBER: _ClassVar[int]
    DEBUG_ID_FIELD_NUMBER: _ClassVar[int]
    KNOWN_ENTRIES_FIELD_NUMBER: _ClassVar[int]
    STATE_MAP_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_STATE_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    RETRY_COUNT_SINCE_LAST_STORED_ENTRY_FIELD_NUMBER: _ClassVar[int]
    DURATION_SINCE_LAST_STORED_ENTRY_FIELD_NUMBER: _ClassVar[int]
    RANDOM_SEED_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    id: bytes
    debug_id: str
    known_entries: int
    state_map: _containers.RepeatedCompositeFieldContainer[StartMessage.StateEntry]
    partial_state: bool
    key: str
    retry_count_since_last_stored_entry: int
    duration_since_last_stored_entry: int
    random_seed: int
    scope: str
    limit_key: str
    idempotency_key: str
    def __init__(self, id: _Optional[bytes] = ..., debug_id: _Optional[str] = ..., known_entries: _Optional[int] = ..., state_map: _Optional[_Iterable[_Union[StartMessage.StateEntry, _Mapping]]] = ..., partial_state: _Optional[bool] = ..., key: _Optional[str] = ..., retry_count_since_last_stored_entry: _Optional[int] = ..., duration_since_last_stored_entry: _Optional[int] = ..., random_seed: _Optional[int] = ..., scope: _Optional[str] = ..., limit_key: _Optional[str] = ..., idempotency_key: _Optional[str] = ...) -> None: ...

class Future(_message.Message):
    __slots__ = ("waiting_completions", "waiting_signals", "waiting_named_signals", "nested_futures", "combinator_type")
    WAITING_COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    WAITING_SIGNALS_FIELD_NUMBER: _ClassVar[int]
    WAITING_NAMED_SIGNALS_FIELD_NUMBER: _ClassVar[int]
    NESTED_FUTURES_FIELD_NUMBER: _ClassVar[int]
    COMBINATOR_TYPE_FIELD_NUMBER: _ClassVar[int]
    waiting_completions: _containers.RepeatedScalarFieldContainer[int]
    waiting_signals: _containers.RepeatedScalarFieldContainer[int]
    waiting_named_signals: _containers.RepeatedScalarFieldContainer[str]
    nested_futures: _containers.RepeatedCompositeFieldContainer[Future]
    combinator_type: CombinatorType
    def __init__(self, waiting_completions: _Optional[_Iterable[int]] = ..., waiting_signals: _Optional[_Iterable[int]] = ..., waiting_named_signals: _Optional[_Iterable[str]] = ..., nested_futures: _Optional[_Iterable[_Union[Future, _Mapping]]] = ..., combinator_type: _Optional[_Union[CombinatorType, str]] = ...) -> None: ...

class SuspensionMessage(_message.Message):
    __slots__ = ("waiting_completions", "waiting_signals", "waiting_named_signals", "awaiting_on")
    WAITING_COMPLETIONS_FIELD_NUMBER: _ClassVar[int]
    WAITING_SIGNALS_FIELD_NUMBER: _ClassVar[int]
    WAITING_NAMED_SIGNALS_FIELD_NUMBER: _ClassVar[int]
    AWAITING_ON_FIELD_NUMBER: _ClassVar[int]
    waiting_completions: _containers.RepeatedScalarFieldContainer[int]
    waiting_signals: _containers.RepeatedScalarFieldContainer[int]
    waiting_named_signals: _containers.RepeatedScalarFieldContainer[str]
    awaiting_on: Future
    def __init__(self, waiting_completions: _Optional[_Iterable[int]] = ..., waiting_signals: _Optional[_Iterable[int]] = ..., waiting_named_signals: _Optional[_Iterable[str]] = ..., awaiting_on: _Optional[_Union[Future, _Mapping]] = ...) -> None: ...

class ErrorMessage(_message.Message):
    __slots__ = ("code", "message", "stacktrace", "related_command_index", "related_command_name", "related_command_type", "next_retry_delay", "behavior")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    STACKTRACE_FIELD_NUMBER: _ClassVar[int]
    RELATED_COMMAND_INDEX_FIELD_NUMBER: _ClassVar[int]
    RELATED_COMMAND_NAME_FIELD_NUMBER: _ClassVar[int]
    RELATED_COMMAND_TYPE_FIELD_NUMBER: _ClassVar[int]
    NEXT_RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    BEHAVIOR_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    stacktrace: str
    related_command_index: int
    related_command_name: str
    related_command_type: int
    next_retry_delay: int
    behavior: ErrorBehavior
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., stacktrace: _Optional[str] = ..., related_command_index: _Optional[int] = ..., related_command_name: _Optional[str] = ..., related_command_type: _Optional[int] = ..., next_retry_delay: _Optional[int] = ..., behavior: _Optional[_Union[ErrorBehavior, str]] = ...) -> None: ...

class EndMessage(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class CommandAckMessage(_message.Message):
    __slots__ = ("command_index",)
    COMMAND_INDEX_FIELD_NUMBER: _ClassVar[int]
    command_index: int
    def __init__(self, command_index: _Optional[int] = ...) -> None: ...

class ProposeRunCompletionMessage(_message.Message):
    __slots__ = ("result_completion_id", "value", "failure")
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    result_completion_id: int
    value: bytes
    failure: Failure
    def __init__(self, result_completion_id: _Optional[int] = ..., value: _Optional[bytes] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class AwaitingOnMessage(_message.Message):
    __slots__ = ("awaiting_on", "executing_side_effects")
    AWAITING_ON_FIELD_NUMBER: _ClassVar[int]
    EXECUTING_SIDE_EFFECTS_FIELD_NUMBER: _ClassVar[int]
    awaiting_on: Future
    executing_side_effects: bool
    def __init__(self, awaiting_on: _Optional[_Union[Future, _Mapping]] = ..., executing_side_effects: _Optional[bool] = ...) -> None: ...

class ProposeRunCompletionAckMessage(_message.Message):
    __slots__ = ("completion_id",)
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    def __init__(self, completion_id: _Optional[int] = ...) -> None: ...

class NotificationTemplate(_message.Message):
    __slots__ = ("completion_id", "signal_id", "signal_name", "void", "value", "failure", "invocation_id", "state_keys")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_ID_FIELD_NUMBER: _ClassVar[int]
    SIGNAL_NAME_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_KEYS_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    signal_id: int
    signal_name: str
    void: Void
    value: Value
    failure: Failure
    invocation_id: str
    state_keys: StateKeys
    def __init__(self, completion_id: _Optional[int] = ..., signal_id: _Optional[int] = ..., signal_name: _Optional[str] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., invocation_id: _Optional[str] = ..., state_keys: _Optional[_Union[StateKeys, _Mapping]] = ...) -> None: ...

class InputCommandMessage(_message.Message):
    __slots__ = ("headers", "name", "value")
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    name: str
    value: Value
    def __init__(self, headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., name: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class OutputCommandMessage(_message.Message):
    __slots__ = ("name", "value", "failure")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: Value
    failure: Failure
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class GetLazyStateCommandMessage(_message.Message):
    __slots__ = ("key", "result_completion_id", "name")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    result_completion_id: int
    name: str
    def __init__(self, key: _Optional[bytes] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class GetLazyStateCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "void", "value")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    void: Void
    value: Value
    def __init__(self, completion_id: _Optional[int] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class SetStateCommandMessage(_message.Message):
    __slots__ = ("key", "value", "name")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    value: Value
    name: str
    def __init__(self, key: _Optional[bytes] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class ClearStateCommandMessage(_message.Message):
    __slots__ = ("key", "name")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    name: str
    def __init__(self, key: _Optional[bytes] = ..., name: _Optional[str] = ...) -> None: ...

class ClearAllStateCommandMessage(_message.Message):
    __slots__ = ("name",)
    NAME_FIELD_NUMBER: _ClassVar[int]
    name: str
    def __init__(self, name: _Optional[str] = ...) -> None: ...

class GetLazyStateKeysCommandMessage(_message.Message):
    __slots__ = ("result_completion_id", "name")
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    result_completion_id: int
    name: str
    def __init__(self, result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class GetLazyStateKeysCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "state_keys")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    STATE_KEYS_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    state_keys: StateKeys
    def __init__(self, completion_id: _Optional[int] = ..., state_keys: _Optional[_Union[StateKeys, _Mapping]] = ...) -> None: ...

class GetEagerStateCommandMessage(_message.Message):
    __slots__ = ("key", "name", "void", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: bytes
    name: str
    void: Void
    value: Value
    def __init__(self, key: _Optional[bytes] = ..., name: _Optional[str] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ...) -> None: ...

class GetEagerStateKeysCommandMessage(_message.Message):
    __slots__ = ("name", "value")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    name: str
    value: StateKeys
    def __init__(self, name: _Optional[str] = ..., value: _Optional[_Union[StateKeys, _Mapping]] = ...) -> None: ...

class GetPromiseCommandMessage(_message.Message):
    __slots__ = ("key", "result_completion_id", "name")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    key: str
    result_completion_id: int
    name: str
    def __init__(self, key: _Optional[str] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class GetPromiseCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "value", "failure")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    value: Value
    failure: Failure
    def __init__(self, completion_id: _Optional[int] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class PeekPromiseCommandMessage(_message.Message):
    __slots__ = ("key", "result_completion_id", "name")
    KEY_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    key: str
    result_completion_id: int
    name: str
    def __init__(self, key: _Optional[str] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class PeekPromiseCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "void", "value", "failure")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    void: Void
    value: Value
    failure: Failure
    def __init__(self, completion_id: _Optional[int] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class CompletePromiseCommandMessage(_message.Message):
    __slots__ = ("key", "completion_value", "completion_failure", "result_completion_id", "name")
    KEY_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_VALUE_FIELD_NUMBER: _ClassVar[int]
    COMPLETION_FAILURE_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    key: str
    completion_value: Value
    completion_failure: Failure
    result_completion_id: int
    name: str
    def __init__(self, key: _Optional[str] = ..., completion_value: _Optional[_Union[Value, _Mapping]] = ..., completion_failure: _Optional[_Union[Failure, _Mapping]] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class CompletePromiseCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "void", "failure")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    void: Void
    failure: Failure
    def __init__(self, completion_id: _Optional[int] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class SleepCommandMessage(_message.Message):
    __slots__ = ("wake_up_time", "result_completion_id", "name")
    WAKE_UP_TIME_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    wake_up_time: int
    result_completion_id: int
    name: str
    def __init__(self, wake_up_time: _Optional[int] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class SleepCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "void")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    void: Void
    def __init__(self, completion_id: _Optional[int] = ..., void: _Optional[_Union[Void, _Mapping]] = ...) -> None: ...

class CallCommandMessage(_message.Message):
    __slots__ = ("service_name", "handler_name", "parameter", "headers", "key", "idempotency_key", "scope", "limit_key", "invocation_id_notification_idx", "result_completion_id", "name")
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    HANDLER_NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_NOTIFICATION_IDX_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    service_name: str
    handler_name: str
    parameter: bytes
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    key: str
    idempotency_key: str
    scope: str
    limit_key: str
    invocation_id_notification_idx: int
    result_completion_id: int
    name: str
    def __init__(self, service_name: _Optional[str] = ..., handler_name: _Optional[str] = ..., parameter: _Optional[bytes] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., key: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., scope: _Optional[str] = ..., limit_key: _Optional[str] = ..., invocation_id_notification_idx: _Optional[int] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class CallCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "value", "failure")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    value: Value
    failure: Failure
    def __init__(self, completion_id: _Optional[int] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class CallInvocationIdCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "invocation_id")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    invocation_id: str
    def __init__(self, completion_id: _Optional[int] = ..., invocation_id: _Optional[str] = ...) -> None: ...

class OneWayCallCommandMessage(_message.Message):
    __slots__ = ("service_name", "handler_name", "parameter", "invoke_time", "headers", "key", "idempotency_key", "scope", "limit_key", "invocation_id_notification_idx", "name")
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    HANDLER_NAME_FIELD_NUMBER: _ClassVar[int]
    PARAMETER_FIELD_NUMBER: _ClassVar[int]
    INVOKE_TIME_FIELD_NUMBER: _ClassVar[int]
    HEADERS_FIELD_NUMBER: _ClassVar[int]
    KEY_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    LIMIT_KEY_FIELD_NUMBER: _ClassVar[int]
    INVOCATION_ID_NOTIFICATION_IDX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    service_name: str
    handler_name: str
    parameter: bytes
    invoke_time: int
    headers: _containers.RepeatedCompositeFieldContainer[Header]
    key: str
    idempotency_key: str
    scope: str
    limit_key: str
    invocation_id_notification_idx: int
    name: str
    def __init__(self, service_name: _Optional[str] = ..., handler_name: _Optional[str] = ..., parameter: _Optional[bytes] = ..., invoke_time: _Optional[int] = ..., headers: _Optional[_Iterable[_Union[Header, _Mapping]]] = ..., key: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., scope: _Optional[str] = ..., limit_key: _Optional[str] = ..., invocation_id_notification_idx: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class SendSignalCommandMessage(_message.Message):
    __slots__ = ("target_invocation_id", "idx", "name", "void", "value", "failure", "entry_name")
    TARGET_INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    IDX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    ENTRY_NAME_FIELD_NUMBER: _ClassVar[int]
    target_invocation_id: str
    idx: int
    name: str
    void: Void
    value: Value
    failure: Failure
    entry_name: str
    def __init__(self, target_invocation_id: _Optional[str] = ..., idx: _Optional[int] = ..., name: _Optional[str] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., entry_name: _Optional[str] = ...) -> None: ...

class RunCommandMessage(_message.Message):
    __slots__ = ("result_completion_id", "name")
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    result_completion_id: int
    name: str
    def __init__(self, result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class RunCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "value", "failure")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    value: Value
    failure: Failure
    def __init__(self, completion_id: _Optional[int] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class AttachInvocationCommandMessage(_message.Message):
    __slots__ = ("invocation_id", "idempotent_request_target", "workflow_target", "result_completion_id", "name")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_REQUEST_TARGET_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TARGET_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    idempotent_request_target: IdempotentRequestTarget
    workflow_target: WorkflowTarget
    result_completion_id: int
    name: str
    def __init__(self, invocation_id: _Optional[str] = ..., idempotent_request_target: _Optional[_Union[IdempotentRequestTarget, _Mapping]] = ..., workflow_target: _Optional[_Union[WorkflowTarget, _Mapping]] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class AttachInvocationCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "value", "failure")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    value: Value
    failure: Failure
    def __init__(self, completion_id: _Optional[int] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class GetInvocationOutputCommandMessage(_message.Message):
    __slots__ = ("invocation_id", "idempotent_request_target", "workflow_target", "result_completion_id", "name")
    INVOCATION_ID_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENT_REQUEST_TARGET_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_TARGET_FIELD_NUMBER: _ClassVar[int]
    RESULT_COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    invocation_id: str
    idempotent_request_target: IdempotentRequestTarget
    workflow_target: WorkflowTarget
    result_completion_id: int
    name: str
    def __init__(self, invocation_id: _Optional[str] = ..., idempotent_request_target: _Optional[_Union[IdempotentRequestTarget, _Mapping]] = ..., workflow_target: _Optional[_Union[WorkflowTarget, _Mapping]] = ..., result_completion_id: _Optional[int] = ..., name: _Optional[str] = ...) -> None: ...

class GetInvocationOutputCompletionNotificationMessage(_message.Message):
    __slots__ = ("completion_id", "void", "value", "failure")
    COMPLETION_ID_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    completion_id: int
    void: Void
    value: Value
    failure: Failure
    def __init__(self, completion_id: _Optional[int] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class CompleteAwakeableCommandMessage(_message.Message):
    __slots__ = ("awakeable_id", "value", "failure", "name")
    AWAKEABLE_ID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    awakeable_id: str
    value: Value
    failure: Failure
    name: str
    def __init__(self, awakeable_id: _Optional[str] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ..., name: _Optional[str] = ...) -> None: ...

class SignalNotificationMessage(_message.Message):
    __slots__ = ("idx", "name", "void", "value", "failure")
    IDX_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VOID_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    FAILURE_FIELD_NUMBER: _ClassVar[int]
    idx: int
    name: str
    void: Void
    value: Value
    failure: Failure
    def __init__(self, idx: _Optional[int] = ..., name: _Optional[str] = ..., void: _Optional[_Union[Void, _Mapping]] = ..., value: _Optional[_Union[Value, _Mapping]] = ..., failure: _Optional[_Union[Failure, _Mapping]] = ...) -> None: ...

class StateKeys(_message.Message):
    __slots__ = ("keys",)
    KEYS_FIELD_NUMBER: _ClassVar[int]
    keys: _containers.RepeatedScalarFieldContainer[bytes]
    def __init__(self, keys: _Optional[_Iterable[bytes]] = ...) -> None: ...

class Value(_message.Message):
    __slots__ = ("content",)
    CONTENT_FIELD_NUMBER: _ClassVar[int]
    content: bytes
    def __init__(self, content: _Optional[bytes] = ...) -> None: ...

class Failure(_message.Message):
    __slots__ = ("code", "message", "metadata")
    CODE_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    METADATA_FIELD_NUMBER: _ClassVar[int]
    code: int
    message: str
    metadata: _containers.RepeatedCompositeFieldContainer[FailureMetadata]
    def __init__(self, code: _Optional[int] = ..., message: _Optional[str] = ..., metadata: _Optional[_Iterable[_Union[FailureMetadata, _Mapping]]] = ...) -> None: ...

class FailureMetadata(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class Header(_message.Message):
    __slots__ = ("key", "value")
    KEY_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    key: str
    value: str
    def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...

class WorkflowTarget(_message.Message):
    __slots__ = ("workflow_name", "workflow_key", "scope")
    WORKFLOW_NAME_FIELD_NUMBER: _ClassVar[int]
    WORKFLOW_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    workflow_name: str
    workflow_key: str
    scope: str
    def __init__(self, workflow_name: _Optional[str] = ..., workflow_key: _Optional[str] = ..., scope: _Optional[str] = ...) -> None: ...

class IdempotentRequestTarget(_message.Message):
    __slots__ = ("service_name", "service_key", "handler_name", "idempotency_key", "scope")
    SERVICE_NAME_FIELD_NUMBER: _ClassVar[int]
    SERVICE_KEY_FIELD_NUMBER: _ClassVar[int]
    HANDLER_NAME_FIELD_NUMBER: _ClassVar[int]
    IDEMPOTENCY_KEY_FIELD_NUMBER: _ClassVar[int]
    SCOPE_FIELD_NUMBER: _ClassVar[int]
    service_name: str
    service_key: str
    handler_name: str
    idempotency_key: str
    scope: str
    def __init__(self, service_name: _Optional[str] = ..., service_key: _Optional[str] = ..., handler_name: _Optional[str] = ..., idempotency_key: _Optional[str] = ..., scope: _Optional[str] = ...) -> None: ...

class Void(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
