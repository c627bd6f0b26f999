import { Quota } from './Quota.js';
import { Usage } from './Usage.js';
import { Shards } from './Shards.js';
import { CreateShard } from './CreateShard.js';

export function TeamView(props: { teamId: string; teamName: string; role: string }) {
  const canWrite = props.role !== 'VIEWER';
  return (
    <div className="team">
      <h1>Team {props.teamName}</h1>
      <Quota teamId={props.teamId} />
      {canWrite && <CreateShard teamId={props.teamId} />}
      <Shards teamId={props.teamId} canWrite={canWrite} />
      <Usage teamId={props.teamId} teamName={props.teamName} />
    </div>
  );
}
