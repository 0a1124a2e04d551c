// cluster-key-slot (the hash slot function ioredis uses) ships no types: the hash slot of a key, honouring its {tag}.
declare module 'cluster-key-slot' {
  export default function calculateSlot(key: string): number;
}
