/** True for a unique constraint violation (Prisma's P2002), e.g. two teams racing for one name. */
export function isUniqueViolation(error: unknown): boolean {
  return (
    typeof error === 'object' && error !== null && (error as { code?: unknown }).code === 'P2002'
  );
}
