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

/** A team with room for the whole run (quota maxTotal), and the secret of a MEMBER token of it. */
export async function teamToken(url, admin, { team, maxTotal, tokenName }) {
  const { createTeam } = must(
    await graphql(
      url,
      'mutation ($name: String!) { createTeam(name: $name) { id } }',
      { name: team },
      admin,
    ),
  );
  must(
    await graphql(
      url,
      `
        mutation ($t: ID!, $max: String!) {
          setQuotaPolicy(
            teamId: $t
            input: { maxTotal: $max, maxShards: 100000, maxPerShard: "1t" }
          ) {
            id
          }
        }
      `,
      { t: createTeam.id, max: maxTotal },
      admin,
    ),
  );
  return must(
    await graphql(
      url,
      `
        mutation ($t: ID!, $name: String!) {
          createApiToken(teamId: $t, role: MEMBER, name: $name) {
            secret
          }
        }
      `,
      { t: createTeam.id, name: tokenName },
      admin,
    ),
  ).createApiToken.secret;
}
