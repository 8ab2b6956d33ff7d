// Prints every API key of the Kafka client jar on the class path with the request
// versions Kafka defines (validVersions of its clients/src/main/resources/common/message
// *Request.json, which the build turns into ApiMessageType) and the listeners serving it.
// kbroker/docs/kafka_apis.py holds this output for Kafka 4.3:
//   java -cp ~/.cache/kbroker-test-tools/kafka-java-4/kafka-clients.jar scripts/KafkaApiRanges.java
import org.apache.kafka.common.message.ApiMessageType;

public class KafkaApiRanges {
    public static void main(String[] args) {
        for (ApiMessageType type : ApiMessageType.values()) {
            System.out.println(type.apiKey() + "\t" + type.name + "\t"
                + type.lowestSupportedVersion() + "\t" + type.highestSupportedVersion(true) + "\t"
                + type.highestSupportedVersion(false) + "\t" + type.listeners());
        }
    }
}
