"""OpenAI-shaped request and response models (pydantic v2).

Requests are validated strictly (a string where a number belongs is a 400, not silently coerced)
and unknown fields are ignored, as the OpenAI API and vLLM do, so clients that send extra keys keep
working. Ranges follow the OpenAI API reference; vLLM extras (`top_k`, `min_p`,
`repetition_penalty`, `ignore_eos`, `stop_token_ids`, `min_tokens`, `skip_special_tokens`,
`include_stop_str_in_output`) are accepted on both endpoints. Every string a client sends must be
encodable as UTF-8 (a lone surrogate such as "\\ud800" is a 400 naming the field, not a tokenizer crash).
"""
from __future__ import annotations

import time
from typing import Annotated, Any, Literal, Union

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, StrictInt, StrictStr

from engine.sampling_params import SEED_END, SEED_MIN

MAX_TOP_LOGPROBS = 20
MAX_N = 128
# The engine checks every stop string and stop id after every token of the request: bounded so one
# request cannot slow every other request's steps.
MAX_STOP_STRINGS = 64
MAX_STOP_TOKEN_IDS = 1024


def _utf8(s: str) -> str:
    try:
        s.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(f"the string is not valid Unicode (lone surrogate at index {exc.start})") from None
    return s


Text = Annotated[StrictStr, AfterValidator(_utf8)]


class _Request(BaseModel):
    # Python's JSON parser accepts NaN and Infinity; no sampling field has a meaning for them.
    model_config = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)


class StreamOptions(_Request):
    include_usage: bool = False


class _SamplingFields(_Request):
    """Fields shared by /v1/completions and /v1/chat/completions."""

    model: Text | None = None
    max_tokens: int | None = Field(default=None, ge=1)
    min_tokens: int = Field(default=0, ge=0)  # vLLM's; at most the request's max_tokens (params.per_prompt)
    temperature: float | None = Field(default=None, ge=0.0, le=2.0)
    top_p: float | None = Field(default=None, gt=0.0, le=1.0)
    top_k: int | None = Field(default=None, ge=-1)
    n: int = Field(default=1, ge=1, le=MAX_N)
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    # The bound counts strings: on the union it would also cap a single stop string at 64 characters.
    stop: Text | Annotated[list[Text], Field(max_length=MAX_STOP_STRINGS)] | None = None
    stop_token_ids: list[StrictInt] | None = Field(default=None, max_length=MAX_STOP_TOKEN_IDS)
    include_stop_str_in_output: bool = False
    seed: int | None = Field(default=None, ge=SEED_MIN, lt=SEED_END)
    stream: bool = False
    stream_options: StreamOptions | None = None
    ignore_eos: bool = False
    skip_special_tokens: bool = True
    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(default=1.0, gt=0.0)
    logit_bias: dict[str, float] | None = None  # only empty is supported (checked in params.py)
    user: str | None = None


TokenIds = list[StrictInt]
PromptType = Union[Text, list[Text], TokenIds, list[TokenIds]]


class CompletionRequest(_SamplingFields):
    prompt: PromptType
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    echo: bool = False
    suffix: str | None = None  # ignored, as vLLM does
    best_of: int | None = Field(default=None, ge=1)


class TextPart(_Request):
    type: Literal["text"]
    text: Text


class ChatMessage(_Request):
    model_config = ConfigDict(strict=True, extra="allow", allow_inf_nan=False)  # name, tool_call_id, ...
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: Text | list[TextPart] | None = None


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]


class ChatCompletionRequest(_SamplingFields):
    messages: list[ChatMessage]
    max_completion_tokens: int | None = Field(default=None, ge=1)
    logprobs: bool = False
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    response_format: ResponseFormat | None = None
    tools: list[dict[str, Any]] | None = None
    tool_choice: Any = None


class TokenizeRequest(_Request):
    model: Text | None = None
    prompt: Text | None = None
    messages: list[ChatMessage] | None = None
    add_special_tokens: bool = True


class DetokenizeRequest(_Request):
    model: Text | None = None
    tokens: TokenIds


# ---- responses -----------------------------------------------------------------------------


class ErrorInfo(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    error: ErrorInfo


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class CompletionLogprobs(BaseModel):
    """Legacy completions logprobs: parallel lists, one entry per generated token."""

    tokens: list[str] = Field(default_factory=list)
    token_logprobs: list[float | None] = Field(default_factory=list)
    top_logprobs: list[dict[str, float] | None] = Field(default_factory=list)
    text_offset: list[int] = Field(default_factory=list)


class CompletionChoice(BaseModel):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None


class TopLogprob(BaseModel):
    token: str
    logprob: float
    bytes: list[int] | None = None


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class ChatLogprobs(BaseModel):
    content: list[TokenLogprob] | None = None


class ChatResponseMessage(BaseModel):
    role: str = "assistant"
    content: str | None = None


class ChatChoice(BaseModel):
    index: int
    message: ChatResponseMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: str | None = None
    stop_reason: int | str | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int = Field(default_factory=lambda: int(time.time()))
    model: str
    choices: list[ChatChoice]
    usage: Usage


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int = Field(default_factory=lambda: int(time.time()))
    owned_by: str = "megakernel"
    root: str | None = None
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]
