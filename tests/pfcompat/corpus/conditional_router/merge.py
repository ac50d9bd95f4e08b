from promptflow.core import tool


@tool
def merge(search_answer: str = None, chat_answer: str = None) -> str:
    return search_answer or chat_answer or "nothing"
