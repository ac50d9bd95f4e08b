"""Turn the structured inputs of the judged flows into the plain text a judge prompt needs.

Evaluation data arrives in several shapes (METRICS.md, section F): a request may be a string,
``{messages: [...]}`` or ``{query, history}``; retrieved context may be a list of
``{content, doc_uri}``, a list of ``{id, title, content}`` citations, plain strings or the same
list encoded as a JSON string (CSV cells); a history may be Prompt Flow's
``[{inputs: {question}, outputs: {answer}}]`` or OpenAI messages. Normalising that in Jinja2
would hide the rules in templates; here they are pure functions the flows call through small
``python`` nodes, so each rule is unit-tested once and every flow applies it the same way.

Shapes that cannot be read raise ``ValueError`` naming what was expected, which fails that one
row with a message instead of sending the judge an empty or garbled prompt.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from flowkit.metrics.keys import returns_keys

_TEXT_KEYS = ("content", "text", "page_content", "chunk")
_ID_KEYS = ("id", "doc_id", "document_id", "doc_uri", "uri", "url", "source")


def _maybe_json(value: Any) -> Any:
    """Decode a JSON list/object that arrived as text (CSV cells, stringified columns)."""
    if isinstance(value, str) and value.strip()[:1] in ("[", "{"):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def message_text(content: Any) -> str:
    """The text of an OpenAI message ``content``: a string or a list of typed parts."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, Sequence):
        parts = []
        for part in content:
            if isinstance(part, str):
                parts.append(part)
            elif isinstance(part, Mapping) and isinstance(part.get("text"), str):
                parts.append(part["text"])
        return "\n".join(parts)
    return str(content)


def unwrap_conversation(value: Any) -> Any:
    """azure-ai-evaluation's ``conversation`` column, ``{"messages": [...]}``, as its message
    list; any other value as it is."""
    value = _maybe_json(value)
    if isinstance(value, Mapping) and set(value) <= {"messages", "context"} and "messages" in value:
        return value["messages"]
    return value


def _messages(value: Any) -> list[Mapping[str, Any]] | None:
    """``value`` as a list of role/content messages, or None when it is not one."""
    value = unwrap_conversation(value)
    if (
        isinstance(value, Sequence)
        and not isinstance(value, str)
        and all(isinstance(m, Mapping) and "role" in m for m in value)
    ):
        return list(value)
    return None


def request_text(request: Any) -> str:
    """The turn to judge: the request itself, the last user message, or the ``query``.

    Databricks-style judges look at the last turn of a multi-turn request only, so earlier
    turns are deliberately dropped here rather than shown to the judge.
    """
    decoded = _maybe_json(request)
    if isinstance(decoded, Mapping) or _messages(decoded) is not None:
        request = decoded  # a JSON-encoded request; any other text is the request itself
    if request is None:
        return ""
    if isinstance(request, str):
        return request
    if isinstance(request, Mapping):
        if "messages" in request:
            messages = _messages(request["messages"])
            if messages is None:
                raise ValueError("request.messages must be a list of {role, content} messages")
            return _last_user(messages)
        for key in ("query", "question", "input", "request"):
            if key in request:
                return message_text(request[key])
    if (messages := _messages(request)) is not None:
        return _last_user(messages)
    raise ValueError(
        "request must be a string, {messages: [...]} or {query, history}; "
        f"got {type(request).__name__} {str(request)[:60]!r}"
    )


def _last_user(messages: list[Mapping[str, Any]]) -> str:
    for message in reversed(messages):
        if message.get("role") == "user":
            return message_text(message.get("content"))
    raise ValueError("the messages hold no user message to judge")


def query_text(query: Any) -> str:
    """azure-ai-evaluation's ``query`` given as messages, as its judges are shown it: one
    user message alone is its text; a conversation is every turn, oldest first, as
    ``User turn N:`` and ``Agent turn N:`` blocks of indented text (consecutive messages of a
    role are one turn; system, tool and text-less messages are left out), so a follow-up
    question ("And of Italy?") reaches the judge with what it follows."""
    messages = _messages(query)
    if messages is None:
        return request_text(query)
    turns: list[tuple[str, list[str]]] = []
    for message in messages:
        role = message.get("role")
        text = message_text(message.get("content")) if role in ("user", "assistant") else ""
        if not text:
            continue
        if turns and turns[-1][0] == role:
            turns[-1][1].append(text)
        else:
            turns.append((str(role), [text]))
    if not any(role == "user" for role, _ in turns):
        raise ValueError("the messages hold no user message to judge")
    if len(turns) == 1:
        return "\n".join(turns[0][1])
    blocks, number = [], 0
    for role, texts in turns:
        number += role == "user"
        label = "User" if role == "user" else "Agent"
        lines = "".join("  " + text.replace("\n", "\n  ") + "\n" for text in texts)
        blocks.append(f"{label} turn {max(number, 1)}:\n{lines}")
    return "\n".join(blocks).rstrip("\n")


def is_messages(value: Any) -> bool:
    """Whether ``value`` is a message list, or ``{"messages": [...]}``, as azure-ai-evaluation's
    ``query`` and ``response`` may be (a JSON text of one is not: it may be the text itself)."""
    return not isinstance(value, str) and _messages(value) is not None


def reply_text(response: Any) -> str:
    """The text of a response given as messages, as azure-ai-evaluation reads one: its
    assistant messages' text, one per line; tool calls and results are not the reply."""
    messages = _messages(response)
    if messages is None:
        raise ValueError(
            "a response must be a string or a list of {role, content} messages; "
            f"got {type(response).__name__} {str(response)[:60]!r}"
        )
    texts = [message_text(m.get("content")) for m in messages if m.get("role") == "assistant"]
    texts = [t for t in texts if t]
    if not texts:
        raise ValueError("the response's messages hold no assistant text to judge")
    return "\n".join(texts)


def history_text(history: Any) -> str:
    """A conversation so far as ``User:`` / ``Assistant:`` lines, oldest first.

    Accepts Prompt Flow's chat_history, OpenAI messages, or a ``{query, history}`` request
    (whose history is used). Empty or missing history gives an empty string.
    """
    history = _maybe_json(history)
    if isinstance(history, Mapping) and "history" in history:
        history = history["history"]
    if not history:
        return ""
    if isinstance(history, str):
        return history.strip()
    if (messages := _messages(history)) is not None:
        speaker = {"user": "User", "assistant": "Assistant"}
        return "\n".join(
            f"{speaker[m['role']]}: {message_text(m.get('content'))}"
            for m in messages
            if m.get("role") in speaker
        )
    if isinstance(history, Sequence):
        lines = []
        for turn in history:
            if not isinstance(turn, Mapping):
                raise ValueError("chat_history entries must be {inputs, outputs} objects")
            question = _first_text(turn.get("inputs"), ("question", "query", "chat_input"))
            answer = _first_text(turn.get("outputs"), ("answer", "response", "chat_output"))
            lines += [f"User: {question}", f"Assistant: {answer}"]
        return "\n".join(lines)
    raise ValueError(f"cannot read a chat history from {type(history).__name__}")


def _first_text(part: Any, keys: tuple[str, ...]) -> str:
    if isinstance(part, Mapping):
        for key in keys:
            if key in part:
                return message_text(part[key])
        return message_text(next(iter(part.values()), ""))
    return message_text(part)


def _items(documents: Any, what: str) -> list[tuple[str | None, str | None, str]]:
    """(id, title, text) for each document, whatever shape the list arrives in."""
    documents = _maybe_json(documents)
    if documents is None or documents == "":
        return []
    if isinstance(documents, Mapping):
        # {"citations": [...]} as on Azure chat turns, or {"documents": [...]}
        inner = documents.get("citations", documents.get("documents", documents.get("chunks")))
        documents = inner if inner is not None else [documents]
    if isinstance(documents, str):
        return [(None, None, documents)]
    if not isinstance(documents, Sequence):
        raise ValueError(f"{what} must be a list of documents, got {type(documents).__name__}")
    items: list[tuple[str | None, str | None, str]] = []
    for doc in documents:
        if isinstance(doc, str):
            items.append((None, None, doc))
        elif isinstance(doc, Mapping):
            text = next((doc[k] for k in _TEXT_KEYS if doc.get(k) is not None), None)
            ident = next((doc[k] for k in _ID_KEYS if doc.get(k) not in (None, "")), None)
            if text is None and ident is None:
                raise ValueError(
                    f"{what}: a document has none of the keys {', '.join(_TEXT_KEYS + _ID_KEYS)}"
                )
            title = doc.get("title")
            # A chunk known only by its doc_uri (agent traces often log no text) keeps its
            # place with empty text; the judges show it as such, chunk_relevance skips it.
            body = "" if text is None else str(text)
            items.append((None if ident is None else str(ident), title and str(title), body))
        else:
            raise ValueError(f"{what}: cannot read a document from {type(doc).__name__}")
    return items


def format_chunks(retrieved_context: Any) -> dict[str, Any]:
    """Number the retrieved chunks 1..n for per-chunk judging: ``{text, count}``.

    The judge answers by these numbers, so the numbering, not the doc_uri (which may repeat
    across chunks of one document), is what the verdicts are matched against.
    """
    items = _items(retrieved_context, "retrieved_context")
    blocks = []
    for i, (ident, title, text) in enumerate(items, start=1):
        source = " ".join(p for p in (title, f"({ident})" if ident else None) if p)
        blocks.append(f"[Chunk {i}]{' ' + source if source else ''}\n{_body(text)}")
    return {"text": "\n\n".join(blocks), "count": len(items)}


def _body(text: str) -> str:
    return text.strip() or NO_CONTENT


NO_CONTENT = "(content not given; only the source is known)"


def chunk_list(retrieved_context: Any) -> list[str]:
    """Each retrieved chunk with content as its own text (with its source), for one judge call
    per chunk. A chunk without content cannot be judged for relevance and is left out here;
    :func:`unjudged_chunks` counts them so the row can say so."""
    items = [i for i in _items(retrieved_context, "retrieved_context") if i[2].strip()]
    return [
        " ".join(p for p in (title, f"(source: {ident})" if ident else None) if p)
        + ("\n" if title or ident else "")
        + text.strip()
        for ident, title, text in items
    ]


def unjudged_chunks(retrieved_context: Any) -> int:
    """How many retrieved chunks carry no content (only a doc_uri)."""
    return sum(not text.strip() for _, _, text in _items(retrieved_context, "retrieved_context"))


def format_documents(documents: Any) -> dict[str, Any]:
    """Label each document with its id (its position when it has none): ``{text, count, ids}``.

    Retrieval judges cite documents by id, so the ids the data carries are kept verbatim.
    """
    items = _items(documents, "documents")
    blocks, ids = [], []
    for i, (ident, title, text) in enumerate(items, start=1):
        doc_id = ident if ident is not None else str(i)
        ids.append(doc_id)
        heading = f"[Document id: {doc_id}]" + (f" {title}" if title else "")
        blocks.append(f"{heading}\n{_body(text)}")
    return {"text": "\n\n".join(blocks), "count": len(items), "ids": ids}


def supporting_text(documents: Any) -> str:
    """A context as Spring AI's evaluators give it to their judge: one text, or a list of
    documents (strings or ``{content}``) whose non-blank texts are joined one per line."""
    if isinstance(documents, str) and _maybe_json(documents) is documents:
        return documents
    texts = [text for _, _, text in _items(documents, "context")]
    return "\n".join(text for text in texts if text.strip())


def conversation_turns(messages: Any) -> list[dict[str, Any]]:
    """One entry per assistant reply: ``{turn, question, answer, documents}``.

    ``question`` is the latest user message before the reply, and ``documents`` are the
    citations stored on that assistant message (``context.citations``, METRICS.md F.2).
    """
    listed = _messages(_maybe_json(messages))
    if listed is None:
        raise ValueError("messages must be a list of {role, content} messages")
    turns: list[dict[str, Any]] = []
    question = ""
    for message in listed:
        role = message.get("role")
        if role == "user":
            question = message_text(message.get("content"))
        elif role == "assistant":
            context = _maybe_json(message.get("context"))
            turns.append(
                {
                    "turn": len(turns) + 1,
                    "question": question,
                    "answer": message_text(message.get("content")),
                    "documents": context if context is not None else [],
                }
            )
    return turns


@returns_keys(("text", "count"))
def rag_turns(
    messages: Any = None,
    question: str | None = None,
    answer: str | None = None,
    chat_history: Any = None,
    documents: Any = None,
) -> dict[str, Any]:
    """The replies groundedness_rag judges, as one transcript: ``{text, count}``.

    Either a conversation (``messages``, every assistant reply is judged against its own
    citations) or one reply (``question`` + ``answer`` + ``documents``, with ``chat_history``
    shown as background that is not judged).
    """
    background = ""
    if messages:
        turns = conversation_turns(messages)
        if not turns:
            raise ValueError("messages holds no assistant reply to judge")
    elif answer:
        turns = [
            {
                "turn": 1,
                "question": question or "",
                "answer": answer,
                "documents": documents if documents is not None else [],
            }
        ]
        background = history_text(chat_history)
    else:
        raise ValueError(
            "groundedness_rag needs either 'messages' (a conversation) or 'answer' with "
            "'documents' (and optionally 'question' and 'chat_history')"
        )
    blocks = []
    if background:
        blocks.append(f"=== Earlier conversation (background, not judged) ===\n{background}")
    for turn in turns:
        docs = format_documents(turn["documents"])
        retrieved = docs["text"] if docs["count"] else "(no documents were retrieved)"
        blocks.append(
            f"=== Turn {turn['turn']} ===\nUser: {turn['question']}\n\n"
            f"Retrieved documents:\n{retrieved}\n\nChatbot reply:\n{turn['answer']}"
        )
    return {"text": "\n\n".join(blocks), "count": len(turns)}
