import java.nio.ByteBuffer;
import java.nio.file.Files;
import java.nio.file.Paths;
import java.util.List;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.coordinator.group.generated.StreamsGroupCurrentMemberAssignmentKey;
import org.apache.kafka.coordinator.group.generated.StreamsGroupCurrentMemberAssignmentValue;
import org.apache.kafka.coordinator.group.generated.StreamsGroupMemberMetadataKey;
import org.apache.kafka.coordinator.group.generated.StreamsGroupMemberMetadataValue;
import org.apache.kafka.coordinator.group.generated.StreamsGroupMetadataKey;
import org.apache.kafka.coordinator.group.generated.StreamsGroupMetadataValue;
import org.apache.kafka.coordinator.group.generated.StreamsGroupTargetAssignmentMemberKey;
import org.apache.kafka.coordinator.group.generated.StreamsGroupTargetAssignmentMemberValue;
import org.apache.kafka.coordinator.group.generated.StreamsGroupTargetAssignmentMetadataKey;
import org.apache.kafka.coordinator.group.generated.StreamsGroupTargetAssignmentMetadataValue;
import org.apache.kafka.coordinator.group.generated.StreamsGroupTopologyKey;
import org.apache.kafka.coordinator.group.generated.StreamsGroupTopologyValue;

/**
 * Streams group records of __consumer_offsets read and written by Kafka's own generated
 * classes. "decode FILE": each line holds a record's key and value in hex (the key starts
 * with its int16 record type, the value with its int16 version); prints the record type,
 * the key, the value and how many value bytes were left unread. "encode": prints the hex
 * key and value of a current-assignment record Kafka writes, with the tagged per-task
 * assignment epochs kbroker does not write.
 */
public final class StreamsRecords {
    public static void main(String[] args) throws Exception {
        if (args[0].equals("encode")) {
            StreamsGroupCurrentMemberAssignmentValue value = new StreamsGroupCurrentMemberAssignmentValue()
                .setMemberEpoch(5)
                .setPreviousMemberEpoch(4)
                .setState((byte) 2)
                .setActiveTasks(List.of(new StreamsGroupCurrentMemberAssignmentValue.TaskIds()
                    .setSubtopologyId("0").setPartitions(List.of(0, 2)).setAssignmentEpochs(List.of(5, 5))))
                .setStandbyTasks(List.of())
                .setWarmupTasks(List.of())
                .setActiveTasksPendingRevocation(List.of())
                .setStandbyTasksPendingRevocation(List.of())
                .setWarmupTasksPendingRevocation(List.of());
            StreamsGroupCurrentMemberAssignmentKey key = new StreamsGroupCurrentMemberAssignmentKey()
                .setGroupId("g").setMemberId("m");
            System.out.println(hex(bytes((short) 22, key)) + " " + hex(bytes((short) 0, value)));
            return;
        }
        for (String line : Files.readAllLines(Paths.get(args[1]))) {
            String[] kv = line.split(" ");
            ByteBuffer k = ByteBuffer.wrap(unhex(kv[0]));
            short type = k.getShort();
            ByteBuffer v = ByteBuffer.wrap(unhex(kv[1]));
            short version = v.getShort();
            ByteBufferAccessor key = new ByteBufferAccessor(k);
            ByteBufferAccessor value = new ByteBufferAccessor(v);
            Object[] read;
            switch (type) {
                case 17: read = new Object[] {new StreamsGroupMetadataKey(key, (short) 0), new StreamsGroupMetadataValue(value, version)}; break;
                case 19: read = new Object[] {new StreamsGroupMemberMetadataKey(key, (short) 0), new StreamsGroupMemberMetadataValue(value, version)}; break;
                case 20: read = new Object[] {new StreamsGroupTargetAssignmentMetadataKey(key, (short) 0), new StreamsGroupTargetAssignmentMetadataValue(value, version)}; break;
                case 21: read = new Object[] {new StreamsGroupTargetAssignmentMemberKey(key, (short) 0), new StreamsGroupTargetAssignmentMemberValue(value, version)}; break;
                case 22: read = new Object[] {new StreamsGroupCurrentMemberAssignmentKey(key, (short) 0), new StreamsGroupCurrentMemberAssignmentValue(value, version)}; break;
                case 23: read = new Object[] {new StreamsGroupTopologyKey(key, (short) 0), new StreamsGroupTopologyValue(value, version)}; break;
                default: throw new IllegalArgumentException("not a streams group record type: " + type);
            }
            System.out.println(type + " " + read[0] + " " + read[1] + " left=" + v.remaining());
        }
    }

    private static byte[] bytes(short prefix, ApiMessage message) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ByteBuffer out = ByteBuffer.allocate(2 + message.size(cache, (short) 0));
        out.putShort(prefix);
        message.write(new ByteBufferAccessor(out), cache, (short) 0);
        return out.array();
    }

    private static String hex(byte[] data) {
        StringBuilder out = new StringBuilder();
        for (byte b : data) {
            out.append(String.format("%02x", b));
        }
        return out.toString();
    }

    private static byte[] unhex(String text) {
        byte[] out = new byte[text.length() / 2];
        for (int i = 0; i < out.length; i++) {
            out[i] = (byte) Integer.parseInt(text.substring(2 * i, 2 * i + 2), 16);
        }
        return out;
    }
}
