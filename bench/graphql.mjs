// GraphQL over HTTP for the bench scripts: one POST, the body as JSON, and must() for a
// setup step that may not fail.

export async function graphql(url, query, variables, token) {
  const response = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` },
    body: JSON.stringify({ query, variables }),
  });
  return response.json();
}

export function must(body) {
  if (body.errors) throw new Error(JSON.stringify(body.errors));
  return body.data;
}
