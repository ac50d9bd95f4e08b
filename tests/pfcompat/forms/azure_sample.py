from openai import AzureOpenAI
from promptflow import tool
from promptflow.connections import AzureOpenAIConnection


@tool
def sample_clarity(
    prompt: str, connection: AzureOpenAIConnection, deployment_name: str = "gpt-4"
) -> float:
    # Calls the Azure client directly, as some evaluation flows do, and averages 3 samples.
    client = AzureOpenAI(
        azure_endpoint=connection.api_base,
        api_version=connection.api_version,
        api_key=connection.api_key,
        max_retries=0,
    )
    reply = client.chat.completions.create(
        model=deployment_name,
        messages=[{"role": "system", "content": prompt}],
        max_tokens=5,
        n=3,
    )
    scores = [float(choice.message.content.strip()) for choice in reply.choices]
    assert all(1 <= s <= 3 for s in scores), scores
    return sum(scores) / len(scores)
