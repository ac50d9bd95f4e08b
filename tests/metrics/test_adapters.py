"""Tests for the input adapters of the judged flows: each accepted shape, and clear refusals."""

from __future__ import annotations

import json

import pytest

from flowkit.metrics.adapters import (
    chunk_list,
    conversation_turns,
    format_chunks,
    format_documents,
    history_text,
    message_text,
    rag_turns,
    request_text,
    unjudged_chunks,
)

MESSAGES = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "How do I restore a file?"},
    {"role": "assistant", "content": "Use the Trash view."},
    {"role": "user", "content": "How long is it kept?"},
]

# --------------------------------------------------------------------------- requests


@pytest.mark.parametrize(
    ("request_", "expected"),
    [
        ("What is the limit?", "What is the limit?"),
        ({"messages": MESSAGES}, "How long is it kept?"),
        ({"query": "Offline?", "history": MESSAGES[:3]}, "Offline?"),
        (MESSAGES, "How long is it kept?"),
        (json.dumps({"messages": MESSAGES}), "How long is it kept?"),  # a CSV cell
        ("[urgent] my upload fails", "[urgent] my upload fails"),  # text that only looks like JSON
        (
            {
                "messages": [
                    {
                        "role": "user",
                        "content": [
                            {"type": "text", "text": "Hi"},
                            {"type": "image_url", "image_url": {}},
                        ],
                    }
                ]
            },
            "Hi",
        ),
        (None, ""),
    ],
)
def test_request_text(request_: object, expected: str) -> None:
    assert request_text(request_) == expected


@pytest.mark.parametrize(
    ("request_", "message"),
    [
        ({"messages": [{"role": "assistant", "content": "Hello"}]}, "no user message"),
        ({"messages": "hello"}, "must be a list"),
        ({"prompt": "x"}, "must be a string, {messages"),
        (42, "must be a string"),
    ],
)
def test_request_text_refuses_unknown_shapes(request_: object, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        request_text(request_)


def test_message_text_joins_text_parts() -> None:
    assert message_text([{"type": "text", "text": "a"}, "b", {"type": "image"}]) == "a\nb"
    assert message_text(None) == ""


# --------------------------------------------------------------------------- history


def test_history_from_prompt_flow_chat_history() -> None:
    history = [
        {"inputs": {"question": "Is there a café?"}, "outputs": {"answer": "Yes."}},
        {"inputs": {"question": "Where?"}, "outputs": {"answer": "Ground floor."}},
    ]
    assert history_text(history) == (
        "User: Is there a café?\nAssistant: Yes.\nUser: Where?\nAssistant: Ground floor."
    )


def test_history_from_messages_and_query_request() -> None:
    expected = "User: How do I restore a file?\nAssistant: Use the Trash view."
    assert history_text(MESSAGES[:3]) == expected  # the system message is left out
    assert history_text({"query": "Offline?", "history": MESSAGES[:3]}) == expected
    assert history_text(json.dumps(MESSAGES[:3])) == expected


@pytest.mark.parametrize("empty", [None, [], "", {"query": "q", "history": []}])
def test_empty_history(empty: object) -> None:
    assert history_text(empty) == ""


def test_history_refuses_other_shapes() -> None:
    with pytest.raises(ValueError, match="chat_history entries"):
        history_text(["just text"])


# --------------------------------------------------------------------------- documents


def test_format_chunks_numbers_every_chunk() -> None:
    chunks = [
        {"content": "Hold reset for ten seconds.", "doc_uri": "docs/reset.md"},
        {"content": " Amber means no signal. ", "doc_uri": "docs/reset.md"},
    ]
    out = format_chunks(chunks)
    assert out == {
        "text": "[Chunk 1] (docs/reset.md)\nHold reset for ten seconds.\n\n"
        "[Chunk 2] (docs/reset.md)\nAmber means no signal.",
        "count": 2,
    }
    assert format_chunks(json.dumps(chunks)) == out


@pytest.mark.parametrize("empty", [None, [], "", "[]"])
def test_format_chunks_empty(empty: object) -> None:
    assert format_chunks(empty) == {"text": "", "count": 0}


def test_format_documents_keeps_ids_and_titles() -> None:
    docs = [
        {"id": "hours", "title": "Opening hours", "content": "Mon-Fri 10-18."},
        {"content": "No id here."},
        "plain text",
    ]
    out = format_documents(docs)
    assert out["ids"] == ["hours", "2", "3"]
    assert out["text"].split("\n\n") == [
        "[Document id: hours] Opening hours\nMon-Fri 10-18.",
        "[Document id: 2]\nNo id here.",
        "[Document id: 3]\nplain text",
    ]


def test_format_documents_reads_citation_holders() -> None:
    holder = {"citations": [{"id": "c1", "title": "T", "content": "x"}]}
    assert format_documents(holder)["ids"] == ["c1"]
    assert format_documents(json.dumps(holder))["count"] == 1


def test_documents_without_text_or_source_are_refused() -> None:
    with pytest.raises(ValueError, match="none of the keys"):
        format_documents([{"title": "no body"}])
    # known by its source only: kept, and shown as having no content
    shown = format_documents([{"doc_uri": "docs/a.md"}])["text"]
    assert shown == "[Document id: docs/a.md]\n(content not given; only the source is known)"
    assert chunk_list([{"doc_uri": "docs/a.md"}, {"content": "x"}]) == ["x"]
    assert unjudged_chunks([{"doc_uri": "docs/a.md"}, {"content": "x"}]) == 1
    with pytest.raises(ValueError, match="must be a list"):
        format_chunks(3)


# --------------------------------------------------------------------------- conversations

CONVERSATION = [
    {"role": "user", "content": "Where can I return a bike?"},
    {
        "role": "assistant",
        "content": "At any station.",
        "context": {"citations": [{"id": "r2", "title": "Returning", "content": "Any station."}]},
    },
    {"role": "user", "content": "And if it is full?"},
    {"role": "assistant", "content": "You get 15 free minutes."},
]


def test_conversation_turns_pair_replies_with_questions_and_citations() -> None:
    turns = conversation_turns(CONVERSATION)
    assert [(t["turn"], t["question"], t["answer"]) for t in turns] == [
        (1, "Where can I return a bike?", "At any station."),
        (2, "And if it is full?", "You get 15 free minutes."),
    ]
    assert turns[0]["documents"]["citations"][0]["id"] == "r2"
    assert turns[1]["documents"] == []


def test_rag_turns_conversation_form() -> None:
    out = rag_turns(messages=CONVERSATION)
    assert out["count"] == 2
    assert "=== Turn 1 ===\nUser: Where can I return a bike?" in out["text"]
    assert "[Document id: r2] Returning\nAny station." in out["text"]
    assert "Retrieved documents:\n(no documents were retrieved)" in out["text"]


def test_rag_turns_single_reply_form_shows_history_as_background() -> None:
    history = [{"inputs": {"question": "Open today?"}, "outputs": {"answer": "Yes."}}]
    out = rag_turns(
        question="Until when?",
        answer="Until 6 pm.",
        chat_history=history,
        documents=[{"id": "hours", "content": "Open 10-18."}],
    )
    assert out["count"] == 1
    assert out["text"].startswith(
        "=== Earlier conversation (background, not judged) ===\n"
        "User: Open today?\nAssistant: Yes.\n\n=== Turn 1 ==="
    )
    assert out["text"].endswith("Chatbot reply:\nUntil 6 pm.")


def test_rag_turns_needs_one_form() -> None:
    with pytest.raises(ValueError, match="either 'messages'"):
        rag_turns(question="q")
    with pytest.raises(ValueError, match="no assistant reply"):
        rag_turns(messages=[{"role": "user", "content": "hi"}])
